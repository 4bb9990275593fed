"""`identify.session_of`: which configured header names the agent session, and the tools digest."""

from __future__ import annotations

import json

from proxy import identify

TOOLS = [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}]


def test_first_configured_header_present_wins() -> None:
    names = ["x-claude-code-session-id", "session_id"]
    a = identify.session_of(names, {"session_id": "s1"}, TOOLS)
    b = identify.session_of(names, {"x-claude-code-session-id": "s1", "session_id": "s2"}, TOOLS)
    assert a is not None and b is not None
    assert a.ref != b.ref  # the header's name is part of the ref
    assert identify.session_of(names, {"session_id": "s1"}, None) == identify.Session(a.ref, None)


def test_no_header_no_session() -> None:
    assert identify.session_of(["x-claude-code-session-id"], {"session_id": "s1"}, TOOLS) is None
    assert identify.session_of(["x-claude-code-session-id"], {"x-claude-code-session-id": ""}, TOOLS) is None
    assert identify.session_of([], {"x-claude-code-session-id": "s"}, TOOLS) is None


def test_ref_is_deterministic_and_an_external_id() -> None:
    a = identify.session_of(["h"], {"h": "v"}, TOOLS)
    b = identify.session_of(["h"], {"h": "v"}, list(TOOLS))
    assert a == b and a is not None
    assert a.ref.startswith("session:") and "v" not in a.ref.removeprefix("session:")


def test_tools_hash_is_the_stored_blob_digest() -> None:
    """Compared against calls' `tools_hash`, which the recorder stores as blob_hash(sorted JSON)."""
    assert identify.tools_hash(TOOLS) == identify.blob_hash(identify.blob_text(TOOLS))
    assert json.loads(identify.blob_text(TOOLS)) == TOOLS
    assert identify.tools_hash([]) is None and identify.tools_hash(None) is None
