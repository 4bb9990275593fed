"""The overflow 400 names the model's window, not the budget's (issue: a 16,000 window was
reported as 13,766 once the budget had been shrunk for the upstream's own count)."""

from __future__ import annotations

from policies.base import ContextOverflow
from proxy.projector import overflow_message


def test_names_the_window_and_the_budget_after_the_margin() -> None:
    exc = ContextOverflow(15_000, 11_718, 13_766, 2_048)
    message = overflow_message(exc, 16_000)
    assert message.startswith("This model's maximum context length is 16000 tokens.")
    assert "13766" not in message.split(".")[0]
    assert "input budget was 11718 tokens by ctxproxy's estimate, after the margin" in message


def test_a_budget_at_the_window_says_nothing_more() -> None:
    exc = ContextOverflow(15_000, 13_952, 16_000, 2_048)
    message = overflow_message(exc, 16_000)
    assert message.startswith(
        "This model's maximum context length is 16000 tokens. However, you requested 17048 tokens"
    )
    assert "margin" not in message
    assert overflow_message(exc) == message
