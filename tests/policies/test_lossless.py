"""Lossless first: repeats and near-repeats of later results become markers that give back every
byte; text a later call quotes stays; per-tool rules; and all of it cache-stable (a result's bytes
change only when the trim boundary moves) on both projection paths."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from policies.base import Budget, Item
from policies.config import PolicyConfig, SettingError, ToolResultsConfig, ToolRule
from policies.draft import Inputs
from policies.invariants import check_all, repeats_lossless
from policies.memo import ProjectionCache, project_cached
from policies.projection import project
from policies.repeats import apply_delta, line_delta, marker_event, near_marker, near_repeat, reconstruct, repeat_marker
from policies.search import render_event
from policies.tool_rules import treatment
from policies.trim_tool_results import trim_boundary
from tests.policies.strategies import fake_count
from tests.support.lanes import examples

PROPERTY = settings(max_examples=examples(200), deadline=None)
LINES = st.sampled_from(("", "\r", "a", "b", "def f():", "    return 1", "@@ -1,1 +1,1 @@", "+x", "-y", " "))
TRIMMING = PolicyConfig(
    trigger=0.005,
    target=0.002,
    late_trim=0.005,
    tool_results=ToolResultsConfig(keep_recent_groups=2, clear_at_least=2, old_max_chars=300),
)
"""trimming from 980 tokens of `BUDGET`; 2 recent groups, the boundary moves every 2"""
BUDGET = Budget(200_000, 4_000, 100)


@PROPERTY
@given(st.lists(LINES, max_size=30), st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), LINES), max_size=6))
def test_a_line_delta_gives_back_the_text_exactly(lines: list[str], edits: list[tuple[int, int, str]]) -> None:
    reference = "\n".join(lines)
    changed = list(lines)
    for at, removed, line in edits:
        at = min(at, len(changed))
        changed[at : at + removed] = [line]
    original = "\n".join(changed)
    delta = line_delta(reference, original)
    assert apply_delta(reference, delta) == original
    near = near_repeat(reference, original)
    assert near is None or apply_delta(reference, near) == original
    event("near" if near is not None else "not near")


@PROPERTY
@given(st.text(min_size=1), st.text(min_size=1), st.text(alphabet="ab\n\r ", max_size=40), st.integers(1, 10**6))
def test_markers_reconstruct_the_original_bytes(reference: str, tool: str, tail: str, seq: int) -> None:
    tool = tool.replace("\n", " ").replace("]", ")")
    original = reference + tail
    texts = {seq + 1: reference}
    assert reconstruct(repeat_marker(tool, seq, len(reference), seq + 1), texts.get) == reference
    sent = near_marker(tool, seq, len(original), seq + 1, "; ctxproxy_recall can fetch it") + "\n"
    sent += line_delta(reference, original)
    assert marker_event(sent) == seq
    assert reconstruct(sent, texts.get) == original
    assert reconstruct("[trimmed: tool result of bash, 4 chars; ...]", texts.get) is None


def read(call_id: str, path: str = "src/app.py", name: str = "Read") -> dict[str, Any]:
    arguments = json.dumps({"file_path": path})
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def edit(call_id: str, old: str, new: str) -> dict[str, Any]:
    arguments = json.dumps({"file_path": "src/app.py", "old_string": old, "new_string": new})
    call = {"id": call_id, "type": "function", "function": {"name": "Edit", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def bash(call_id: str, command: str) -> dict[str, Any]:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "Bash", "arguments": json.dumps({"command": command})},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def source(version: int, lines: int = 80) -> str:
    """`src/app.py` after `version` edits: each edit rewrites one function's body."""
    out = []
    for n in range(lines // 4):
        body = f"    return value + {n}" if n >= version else f"    return value * {n}  # edited"
        out += [f"def handler_{n}(value):", f'    """Handle case {n} of the request."""', body, ""]
    return "\n".join(out)


def numbered(history: list[dict[str, Any]]) -> list[Item]:
    return [Item(i + 1, m, fake_count(m)) for i, m in enumerate(history)]


def session(steps: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """A task, then per step: `read` (the file at a version), `edit` (quoting the version's
    function, which the next read shows changed), `test` (a test run, failing or not), `other`."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "fix the handlers"}]
    for k, (kind, version) in enumerate(steps):
        cid = f"c{k}"
        if kind == "read":
            history += [read(cid), result(cid, source(version))]
        elif kind == "edit":
            old = f"    return value + {version}"
            history += [edit(cid, old, f"    return value * {version}  # edited"), result(cid, "The file was edited.")]
        elif kind == "test":
            lines = [f"tests/test_app.py::test_case_{n} PASSED" for n in range(40)]
            if version % 2:
                lines[17] = "tests/test_app.py::test_case_17 FAILED"
            summary = "1 failed, 39 passed" if version % 2 else "40 passed"
            history += [bash(cid, "pytest -q"), result(cid, "\n".join([*lines, f"===== {summary} in 0.5s ====="]))]
        else:
            history += [bash(cid, f"ls dir{k}"), result(cid, "\n".join(f"file_{k}_{n}.txt" for n in range(60)))]
    return history


STEPS = st.lists(st.tuples(st.sampled_from(("read", "read", "edit", "test", "other")), st.integers(0, 3)), max_size=16)


def run(items: list[Item], config: PolicyConfig, cache: ProjectionCache | None = None) -> Any:
    if cache is None:
        return project([], items, None, BUDGET, config, fake_count, recall_tool="ctxproxy_recall")
    return project_cached(cache, Inputs([], items, None, BUDGET, config, fake_count, "ctxproxy_recall"))


@PROPERTY
@given(STEPS, st.integers(1, 4), st.integers(1, 3), st.sampled_from((100, 300, 2000)))
def test_a_growing_session_is_lossless_cache_stable_and_paired(
    steps: list[tuple[str, int]], keep: int, clear: int, old: int
) -> None:
    """Turn by turn: every invariant (pairing, coverage, budget, repeats give back their bytes),
    the memo's projection equal to a fresh one, and the bytes already sent unchanged until the
    boundary moves (then up to the previous cache point)."""
    tool_results = ToolResultsConfig(keep_recent_groups=keep, clear_at_least=clear, old_max_chars=old)
    config = replace(TRIMMING, tool_results=tool_results)
    history = session(steps)
    cache = ProjectionCache()
    previous: Any = None
    previous_boundary = -1
    for n in range(2, len(history) + 1):
        if history[n - 1]["role"] == "assistant":
            continue  # each request ends with a whole group (the proxy sees the results arrive)
        items = numbered(history[:n])
        fresh, cached = run(items, config), run(items, config, cache)
        assert json.dumps(cached.messages) == json.dumps(fresh.messages) and cached.record == fresh.record
        assert check_all([], items, None, BUDGET, fresh) == []
        for entry in fresh.record.trimmed:
            event(f"trimmed as {entry.how}")
        groups = len([m for m in history[:n] if m["role"] != "tool"])
        boundary = trim_boundary(groups, tool_results, BUDGET.sizing)
        if previous is not None and previous.record.trimmed:
            kept = len(previous.messages) - 2  # all but the previous newest group
            if previous_boundary != boundary:
                kept = previous.cache_point + 1 if previous.cache_point is not None else 0
                event("the boundary moved")
            assert json.dumps(fresh.messages[:kept]) == json.dumps(previous.messages[:kept])
        previous, previous_boundary = fresh, boundary


WIDE = replace(TRIMMING, tool_results=replace(TRIMMING.tool_results, keep_recent_groups=4, clear_at_least=4))
"""the default 4 recent groups, boundary moving every 4: a result below it reads the groups up to 3
past the boundary that made it old (`context_horizon`)"""


def test_a_re_read_file_is_sent_once_and_recall_gives_back_the_others() -> None:
    history = session([("read", 0), ("other", 0), ("read", 0), ("other", 0), ("read", 0), ("other", 0), ("test", 0)])
    items = numbered(history)
    projection = run(items, WIDE)  # 8 groups: 4 old, each reading up to group 6
    repeats = [m for m in projection.messages if str(m.get("content")).startswith("[repeat: ")]
    assert [marker_event(m["content"]) for m in repeats] == [3, 7]  # both older reads, naming the newest
    assert all("identical to the result in event 11; ctxproxy_recall can fetch it]" in m["content"] for m in repeats)
    assert [e.how for e in projection.record.trimmed if e.seq in (3, 7)] == ["repeat", "repeat"]
    # recall's `event` reads the stored event: the bytes the marker stands for
    events = [Stored(item.seq, item.message) for item in items]
    assert source(0) in render_event(events, 3, 20_000)


class Stored:
    def __init__(self, seq: int, message: dict[str, Any]) -> None:
        self.seq, self.message = seq, message
        self.branch_id, self.role, self.created_at = "b", str(message["role"]), 0.0


def test_a_file_re_read_after_an_edit_is_sent_as_its_delta() -> None:
    history = session([("read", 0), ("edit", 0), ("read", 1), *[("other", k) for k in range(5)]])
    projection = run(numbered(history), WIDE)
    first = projection.messages[2]["content"]
    assert first.startswith("[near-repeat: tool result of Read (event 3), 1,"), first
    assert "the result in event 7 with these lines changed" in first
    assert "@@ -3,1 +3,1 @@\n+    return value + 0" in first  # the edited line as it was
    assert repeats_lossless(numbered(history), projection.messages) == []


def test_an_edits_old_string_is_never_left_out_of_the_result_it_came_from() -> None:
    quoted = "    return value + 7"
    history = session([("read", 0), ("edit", 7), *[("other", k) for k in range(6)]])
    config = replace(WIDE, tool_results=replace(WIDE.tool_results, old_max_chars=100))
    projection = run(numbered(history), config)
    sent = projection.messages[2]["content"]
    assert sent.startswith("[trimmed: source of Read") and quoted in sent and "text later calls quote" in sent
    # only the newest result holding it: a later read that still shows it takes over
    history = session([("read", 0), ("other", 5), ("read", 0), ("edit", 7), *[("other", k) for k in range(5)]])
    history[6] = result("c2", source(0) + "\n# re-read")  # the same file, not a repeat
    projection = run(numbered(history), config)
    older, newer = projection.messages[2]["content"], projection.messages[6]["content"]
    assert quoted in newer and "text later calls quote" in newer
    assert "text later calls quote" not in older


def test_rules_keep_trim_cap_and_keep_only_the_newest() -> None:
    steps = [("test", 1), ("other", 0), ("test", 1), ("read", 0), *[("other", k) for k in range(1, 8)]]
    history = session(steps)
    history[6] = result("c2", history[6]["content"] + "\n")  # not a repeat of the first run
    rules = (ToolRule("Bash", "trim", max_chars=120), ToolRule("Read", "keep"))
    config = replace(WIDE, tool_results=replace(WIDE.tool_results, rules=rules))
    sent = [str(m.get("content")) for m in run(numbered(history), config).messages]  # 12 groups, 8 old
    assert "first 60 and last 60 kept; event 3" in sent[2]  # trim: head + tail at its own cap
    assert sent[8] == source(0)  # keep: whole, however old
    ls = ToolRule("Bash", keep_last_n=1)
    config = replace(TRIMMING, tool_results=ToolResultsConfig(keep_recent_groups=4, clear_at_least=1, rules=(ls,)))
    projection = run(numbered(session([("other", 0)] * 8)), config)  # groups 1-4 old, 5-7 recent, 8 newest
    assert [e.seq for e in projection.record.trimmed] == [3, 5, 7, 9, 11, 13]  # 5 and 6 recent, yet superseded


def test_rule_validation_and_lookup() -> None:
    config = ToolResultsConfig(
        exclude_tools=("Task",), rules=[ToolRule("Read", keep_last_n=2), ToolRule("mcp__*", "trim", 1000)]
    )
    assert isinstance(config.rules, tuple)
    assert treatment(config, "Task").action == "keep"
    assert treatment(config, "mcp__github").old_cap == 1000 and treatment(config, "mcp__github").action == "trim"
    assert treatment(config, "Read").keep_last_n == 2 and treatment(config, "Bash").action == "type-aware"
    for bad, field in (
        ({"tool": ""}, "tool"),
        ({"tool": "x", "action": "drop"}, "action"),
        ({"tool": "x", "action": "keep", "max_chars": 10}, "action"),
        ({"tool": "x", "max_chars": -1}, "max_chars"),
        ({"tool": "x", "keep_last_n": 0}, "keep_last_n"),
    ):
        with pytest.raises(SettingError) as info:
            ToolRule(**bad)  # type: ignore[arg-type]
        assert info.value.field == field
