"""The diff view's elided parts (`proxy.ui.elided`) on real trimmed results: the segments give back
the stored original byte for byte, what they mark kept is what the model was sent, and what
they mark elided is what it was not."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.trim_result import Shaping, shape_message
from proxy.ui.elided import pieces, segments

OUTPUTS = Path(__file__).resolve().parents[1] / "data" / "tool_outputs"


def trimmed(text: str, action: str = "type-aware", cap: int = 400) -> str:
    spec = Shaping(57, "bash", "{}", cap, action, 0.5, "ctxproxy_recall")
    out = shape_message({"role": "tool", "tool_call_id": "c1", "content": text}, spec)
    assert out is not None
    content = out[0]["content"]
    assert isinstance(content, str)
    return content


@pytest.mark.parametrize("name", sorted(p.name for p in OUTPUTS.glob("*.txt")))
@pytest.mark.parametrize("action", ["type-aware", "trim"])
def test_segments_give_back_the_original_and_mark_what_was_sent(name: str, action: str) -> None:
    original = (OUTPUTS / name).read_text(encoding="utf-8")
    sent = trimmed(original, action)
    parts = segments(original, sent)
    assert "".join(text for text, _ in parts) == original
    kept = [text for text, elided in parts if not elided]
    elided = [text for text, elided in parts if elided]
    assert kept and elided
    assert all(text in sent for text in kept)
    assert sum(map(len, kept)) == sum(map(len, pieces(sent)))  # every piece of the sent text found
    assert all(a != b for (_, a), (_, b) in zip(parts, parts[1:], strict=False))  # kept and elided alternate


def test_an_excerpts_gap_lines_and_cut_lines_are_not_the_originals() -> None:
    original = "\n".join(["first", "x" * 300, "middle one", "middle two", "ERROR last"])
    sent = (
        "[trimmed: output of bash, 341 chars; kept error lines; 2 of 5 lines left out; event 57]\n"
        "first\n" + "x" * 100 + " [... 300 chars, line cut]\n[... 2 lines left out ...]\nERROR last"
    )
    assert segments(original, sent) == [
        ("first\n" + "x" * 100, False),
        ("x" * 200 + "\nmiddle one\nmiddle two\n", True),
        ("ERROR last", False),
    ]


def test_a_repeat_marker_elides_everything() -> None:
    sent = "[repeat: tool result of bash (event 4), 12 chars, identical to the result in event 9]"
    assert segments("hello\nworld!", sent) == [("hello\nworld!", True)]
