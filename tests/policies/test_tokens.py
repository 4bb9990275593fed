"""Offline tiktoken loading, OpenAI-style message framing and the keyed LRU cache."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from policies import tokens
from policies.tokens import (
    IMAGE_TOKENS,
    count_message,
    count_tools,
    encoding_for_model,
    encoding_name_for_model,
)
from proxy.token_counter import RECENT_OBJECTS, TokenCounter


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("openai/gpt-4.1", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("o1-preview", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("claude-3-5-sonnet", "o200k_base"),
        ("deepseek-chat", "o200k_base"),
    ],
)
def test_encoding_name_for_model(model: str, name: str) -> None:
    assert encoding_name_for_model(model) == name


def test_offline_cache_dir_points_at_litellm_without_importing_it() -> None:
    code = (
        "import os, sys\n"
        "os.environ.pop('TIKTOKEN_CACHE_DIR', None)\n"
        "from policies.tokens import encoding_for_model\n"
        "enc = encoding_for_model('gpt-4o')\n"
        "assert enc.name == 'o200k_base'\n"
        "assert os.environ['TIKTOKEN_CACHE_DIR'].endswith(os.path.join('litellm_core_utils', 'tokenizers'))\n"
        "assert 'litellm' not in sys.modules\n"
        "print(len(enc.encode('hello world')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env.update({"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"})  # no network
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"


def test_operator_cache_dir_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/somewhere/else")
    tokens.ensure_offline_cache()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == "/somewhere/else"


def test_count_message_framing() -> None:
    encoding = encoding_for_model("gpt-4o")
    text = "The quick brown fox jumps over the lazy dog."
    plain = count_message({"role": "user", "content": text}, encoding)
    assert plain == 3 + len(encoding.encode("user")) + len(encoding.encode(text))
    parts = count_message({"role": "user", "content": [{"type": "text", "text": text}]}, encoding)
    assert parts == plain
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    with_image = count_message({"role": "user", "content": [{"type": "text", "text": text}, image]}, encoding)
    assert with_image == plain + IMAGE_TOKENS
    named = count_message({"role": "user", "content": text, "name": "alice"}, encoding)
    assert named == plain + len(encoding.encode("alice")) + 1


def test_count_message_tool_calls_and_results() -> None:
    encoding = encoding_for_model("gpt-4o")
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls -la"}'}}
    bare = count_message({"role": "assistant", "content": None}, encoding)
    with_call = count_message({"role": "assistant", "content": None, "tool_calls": [call]}, encoding)
    assert with_call - bare == 3 + len(encoding.encode("bash")) + len(encoding.encode('{"command": "ls -la"}'))
    result = count_message({"role": "tool", "tool_call_id": "c1", "content": ""}, encoding)
    assert result == 3 + len(encoding.encode("tool")) + len(encoding.encode("c1"))


def test_special_token_text_is_plain_text() -> None:
    encoding = encoding_for_model("gpt-4o")
    assert count_message({"role": "user", "content": "<|endoftext|>"}, encoding) > 4


def test_count_tools() -> None:
    encoding = encoding_for_model("gpt-4o")
    tool = {
        "type": "function",
        "function": {"name": "bash", "description": "Run a command", "parameters": {"type": "object"}},
    }
    assert count_tools(None, encoding) == 0
    assert count_tools([tool], encoding) > count_tools([], encoding) == 0
    assert count_tools([tool, tool], encoding) > count_tools([tool], encoding)


def test_counter_uses_the_callers_key_and_stays_bounded() -> None:
    counter = TokenCounter(encoding_for_model("gpt-4o"), max_entries=2)
    short = {"role": "user", "content": "hi"}
    long = {"role": "user", "content": "hello " * 100}
    first = counter.count(short, key="event-1")
    assert counter.count(long, key="event-1") == first  # the key decides: the event is immutable
    counter.count(long, key="event-2")
    counter.count(long, key="event-3")
    assert len(counter) == 2  # event-1 evicted
    assert counter.count(long, key="event-1") > first
    assert counter.hits == 1


def test_counter_call_keys_by_content() -> None:
    counter = TokenCounter(encoding_for_model("gpt-4o"))
    message = {"role": "tool", "tool_call_id": "c", "content": "x" * 50}
    assert counter(message) == counter(dict(message)) == counter.count(message)
    assert counter.misses == 1 and counter.hits == 2
    with pytest.raises(ValueError):
        TokenCounter(encoding_for_model("gpt-4o"), max_entries=0)


def test_counter_call_answers_the_same_object_without_its_digest() -> None:
    counter = TokenCounter(encoding_for_model("gpt-4o"))
    system = {"role": "system", "content": "You are a careful agent. " * 200}
    tokens = counter(system)
    assert counter(system) == tokens and (counter.hits, counter.misses) == (0, 1)  # by identity
    for i in range(RECENT_OBJECTS):
        counter({"role": "user", "content": f"message {i}"})
    assert counter(system) == tokens and counter.hits == 1  # forgotten by identity: the digest's hit


def test_counter_counts_the_same_tools_once() -> None:
    counter = TokenCounter(encoding_for_model("gpt-4o"))
    tools = [{"type": "input_schema_less", "name": "bash", "input_schema": {"type": "object"}}]
    first = counter.count_tools(tools, {"type": "any"})
    assert counter.count_tools([dict(tools[0])], {"type": "any"}) == first  # equal JSON: a hit
    assert counter.hits == 1 and counter.misses == 1
    counter.count_tools(tools, None)  # another tool_choice renders another prompt: counted anew
    assert counter.misses == 2
    assert counter.count_tools(None) == counter.count_tools([]) == 0
    assert first == count_tools(tools, encoding_for_model("gpt-4o"), {"type": "any"})
