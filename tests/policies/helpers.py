"""Tiny message builders for the unit tests."""

from __future__ import annotations

from typing import Any

from policies.base import Item
from tests.policies.strategies import fake_count


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def calls(*ids: str, name: str = "bash") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": name, "arguments": f'{{"id": "{i}"}}'}} for i in ids
        ],
    }


def result(tool_call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": tool_call_id, "content": content}


def items(*messages: dict[str, Any]) -> list[Item]:
    return [Item(i + 1, m, fake_count(m)) for i, m in enumerate(messages)]
