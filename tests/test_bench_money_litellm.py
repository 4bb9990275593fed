"""The money model's prices and arithmetic against a second implementation: LiteLLM's price map
and cost calculator (`litellm.cost_per_token`), which LiteLLM's proxy bills its users with.

`bench.money` decides which input tokens a provider reads from its cache, writes to it or bills
plain; that part is ours alone (`tests/test_bench_money.py` checks it by hand). What a token of
each kind costs is checked here: every list price against LiteLLM's map, and every request of a
replayed run, compacted at a small window, priced both ways.
"""

from __future__ import annotations

import os

import pytest

from bench.bodies import VENDORED
from bench.money import PRICES, price_requests
from bench.savings import requests_of
from proxy.catalog import ModelCatalog
from proxy.policy_settings import Policy
from proxy.projector import Projector
from proxy.replay import load_transcript, replay

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm  # noqa: E402  (after the variable: it would fetch its price map)
from litellm.types.utils import PromptTokensDetailsWrapper, Usage  # noqa: E402

LITELLM_NAMES = {
    "gpt-4o": ("openai", "gpt-4o"),
    "gpt-4.1": ("openai", "gpt-4.1"),
    "gpt-4.1-mini": ("openai", "gpt-4.1-mini"),
    "gpt-5": ("openai", "gpt-5"),
    # the map lists Claude Sonnet 4 under its Bedrock id only, at Anthropic's list price
    "claude-sonnet-4": ("bedrock_converse", "anthropic.claude-sonnet-4-20250514-v1:0"),
    "claude-haiku-4.5": ("anthropic", "claude-haiku-4-5"),
}


def litellm_dollars(model: str, uncached: int, read: int, written: int, output: int) -> float:
    """What LiteLLM bills for one call whose input was `uncached` plain, `read` from the cache
    and `written` to it, as the provider's usage reports them."""
    provider, name = LITELLM_NAMES[model]
    prompt = uncached + read + written
    usage = Usage(
        prompt_tokens=prompt,
        completion_tokens=output,
        total_tokens=prompt + output,
        prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=read),
        cache_read_input_tokens=read,
        cache_creation_input_tokens=written,
    )
    prompt_cost, output_cost = litellm.cost_per_token(
        model=name, prompt_tokens=prompt, completion_tokens=output, usage_object=usage, custom_llm_provider=provider
    )
    return float(prompt_cost + output_cost)


@pytest.mark.parametrize("model", sorted(PRICES))
def test_every_list_price_is_litellms(model):
    info = litellm.model_cost[LITELLM_NAMES[model][1]]
    price = PRICES[model]
    per_million = {key: info[key] * 1e6 for key in info if key.endswith(("_cost_per_token", "_token_cost"))}
    assert price.input == pytest.approx(per_million["input_cost_per_token"])
    assert price.cached == pytest.approx(per_million["cache_read_input_token_cost"])
    assert price.output == pytest.approx(per_million["output_cost_per_token"])
    if price.provider == "anthropic":
        assert price.write == pytest.approx(per_million["cache_creation_input_token_cost"])


@pytest.mark.parametrize("model", ["gpt-4.1", "claude-sonnet-4"])
def test_a_compacted_runs_requests_cost_what_litellm_bills_for_them(model):
    messages, tools, _ = load_transcript(str(VENDORED / "swe-agent__ctf__web__i_got_id_demo.json"))
    report = replay(messages, tools, Policy(context_window=8_000), "gpt-4o", Projector(ModelCatalog()))
    price = PRICES[model]
    for proxied in (True, False):
        requests = requests_of(report, proxied)
        bill = price_requests(requests, price)
        assert any(r.summarizer for r in requests) or not proxied  # with ctxproxy the run compacts
        kinds = {"read": 0, "written": 0}
        for request, billed in zip(requests, bill.per_request, strict=True):
            theirs = litellm_dollars(model, billed.uncached, billed.cache_read, billed.cache_write, request.output)
            theirs += sum(litellm_dollars(model, i, 0, 0, o) for i, o in request.summarizer)
            assert billed.dollars == pytest.approx(theirs, rel=1e-9, abs=1e-12)
            kinds["read"] += billed.cache_read
            kinds["written"] += billed.cache_write
        assert kinds["read"] > 0  # the check covered the cache's prices, not plain input alone
        if price.provider == "anthropic":
            assert kinds["written"] > 0
