"""Type-aware trimming on real tool outputs: each content kind keeps its key lines within the same
budget head + tail gets, and its marker says what it read, what it left out and where the rest is.

The outputs are real: `tests/data/tool_outputs/` (mini-swe-agent runs, see its README) and the
transcripts vendored in `tests/data/transcripts/`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.continuity import script
from bench.lossless import Retention, retention_of
from policies.content_kinds import classify
from policies.excerpt import FILLER, MUST, pick, render
from policies.shaping import GROW_AT_MOST, LEAN, excerpt_budget, shape_json, shape_text
from policies.trim_result import Shaping, shape_message, trim_message
from tests.support.transcripts import load

OUTPUTS = Path(__file__).resolve().parents[1] / "data" / "tool_outputs"
GAP = re.compile(r"^\[\.\.\. [\d,]+ (?:lines?|rows?) left out(?:: .*)? \.\.\.\]$")


def output(name: str) -> str:
    return (OUTPUTS / name).read_text(encoding="utf-8")


def tool_result(transcript: str, contains: str) -> str:
    """The longest tool result of a vendored transcript holding `contains`."""
    messages = load(transcript)["messages"]
    found = [m["content"] for m in messages if m.get("role") == "tool" and contains in (m.get("content") or "")]
    return max(found, key=len)


def sent(text: str, cap: int = 400, tool: str = "bash", arguments: str = "{}", **extra: object) -> str:
    """What `trim_tool_results` sends for `text` as an old result of `tool` (event 57, recall offered)."""
    spec = Shaping(57, tool, arguments, cap, "type-aware", 0.5, "ctxproxy_recall", **extra)  # type: ignore[arg-type]
    trimmed = shape_message({"role": "tool", "tool_call_id": "c1", "content": text}, spec)
    assert trimmed is not None
    content = trimmed[0]["content"]
    assert isinstance(content, str)
    return content


def head_tail(text: str, cap: int = 400) -> str:
    plain = trim_message(
        {"role": "tool", "tool_call_id": "c1", "content": text},
        max_chars=cap,
        head_ratio=0.5,
        tool_name="bash",
        seq=57,
        recall_tool="ctxproxy_recall",
    )
    assert plain is not None
    content = plain[0]["content"]
    assert isinstance(content, str)
    return content


def assert_costs_no_more_than_head_tail_at_its_budget(excerpt: str, text: str, cap: int = 400) -> None:
    """The excerpt costs no more than head + tail at its own budget, which grows for key lines to
    at most `GROW_AT_MOST` times the cap."""
    budget = excerpt_budget(text, cap)
    assert budget <= GROW_AT_MOST * cap
    assert len(excerpt) <= len(head_tail(text, budget))


def assert_excerpt_of(excerpt: str, text: str) -> None:
    """Every line of the excerpt after its marker is a line of `text`, in order, or a gap line."""
    marker, _, body = excerpt.partition("\n")
    assert re.fullmatch(
        r"\[trimmed: .+ of \w+, [\d,]+ chars; kept .+; event 57; ctxproxy_recall can fetch it\]", marker
    )
    lines = text.split("\n")
    at = 0
    for line in body.split("\n"):
        if GAP.match(line) or line.endswith(" chars, line cut]"):
            continue
        at = lines.index(line, at) + 1


@pytest.mark.parametrize("cap", [400, 800])
def test_a_failing_pytest_run_keeps_the_assertion_the_failure_and_the_summary(cap: int) -> None:
    text = output("pytest_failure.txt")
    excerpt = sent(text, cap)
    assert excerpt.startswith("[trimmed: test output of bash, 1,705 chars; kept failures, last frames, summary; ")
    for key in (
        "E       AssertionError: assert 'utf-8' == 'ascii'",
        "FAILED test/core/file_helpers_test.py::test__parser__helper_get_encoding[test/fixtures/linter/",
        "======================== 1 failed, 2 warnings in 0.03s =========================",
    ):
        assert key in excerpt
    assert "test/core/file_helpers_test.py:46: AssertionError" in excerpt  # the last frame
    if cap == 400:  # head + tail at the same cap loses the assertion and the failure
        lost = head_tail(text, cap)
        assert "AssertionError: assert 'utf-8'" not in lost and "FAILED test/core" not in lost
    assert_costs_no_more_than_head_tail_at_its_budget(excerpt, text, cap)
    assert_excerpt_of(excerpt, text)


def test_a_traceback_keeps_its_last_frame_and_the_exception() -> None:
    text = output("traceback.txt")
    excerpt = sent(text)
    assert "OSError: [Errno 6] No such device or address: '/dev/tty'" in excerpt
    assert 'File "/opt/miniconda3/lib/python3.11/site-packages/click/_termui_impl.py", line 823' in excerpt
    assert '    f = open("/dev/tty")' in excerpt
    assert_costs_no_more_than_head_tail_at_its_budget(excerpt, text)
    assert_excerpt_of(excerpt, text)


def test_a_pytest_runs_path_line_references_survive_the_default_cap() -> None:
    # the warnings summary's `path:line` lines sit between the failure and the summary line
    text = output("pytest_failure.txt")
    references = [line for line in text.split("\n") if re.search(r"[\w./-]+\.\w{1,6}:\d+", line)]
    assert len(references) == 5
    excerpt = sent(text)
    assert [line for line in references if line not in excerpt.split("\n")] == []


def test_each_of_several_tracebacks_keeps_its_last_frame_and_exception_at_the_default_cap() -> None:
    text = output("tracebacks.txt")  # four tracebacks, one chained: more key lines than 400 chars hold
    lines = text.split("\n")
    ends = [i for i, line in enumerate(lines) if line.startswith("TypeError: ")]
    frames = [max(j for j in range(i) if lines[j].startswith('  File "')) for i in ends]
    key = [lines[i] for i in ends + frames] + [
        "Error: TypeError: With tag (0066, 0040) got exception: a bytes-like object is required, not 'MultiValue'"
    ]
    assert len(ends) == 4 and sum(len(line) + 1 for line in key) > 400
    excerpt = sent(text)
    assert excerpt.startswith("[trimmed: output of bash, 2,892 chars; kept error lines, last frames; ")
    assert [line for line in key if line not in excerpt.split("\n")] == []
    lost = head_tail(text).split("\n")  # head + tail at the cap: the last traceback's ends only
    assert {line for line in key if line not in lost} == {
        line for line in key if "0066, 0040" in line or "tag.py" in line
    }
    assert_costs_no_more_than_head_tail_at_its_budget(excerpt, text)
    assert_excerpt_of(excerpt, text)


def test_warnings_with_path_line_references_are_output_that_keeps_them() -> None:
    text = output("warnings.txt")  # six `dataset.py:1981: UserWarning` lines, then the script's own output
    warnings = [line for line in text.split("\n") if "dataset.py:1981: UserWarning" in line]
    assert len(warnings) == 6
    excerpt = sent(text)
    assert excerpt.startswith("[trimmed: output of bash, 1,493 chars; ")
    assert [line for line in warnings if line not in excerpt.split("\n")] == []
    assert sum(line in head_tail(text).split("\n") for line in warnings) <= 2
    assert_costs_no_more_than_head_tail_at_its_budget(excerpt, text)


def test_an_excerpts_budget_grows_for_key_lines_up_to_its_maximum_and_is_lean_without_them() -> None:
    errors = "\n".join(f"src/app{i}.py:{i}: ERROR step {i} failed: " + "x" * 60 for i in range(100))
    assert excerpt_budget(errors, 400) == GROW_AT_MOST * 400  # the documented maximum
    one = "\n".join(["plain line"] * 80 + ["ERROR the one failure"] + ["plain line"] * 80)
    assert excerpt_budget(one, 400) == 400  # a few key lines fit the cap: it stays
    assert excerpt_budget("word " * 2000, 400) == int(400 * LEAN)  # no key line: lean
    assert excerpt_budget(output("source.txt"), 400) == int(400 * LEAN)
    assert excerpt_budget(output("tracebacks.txt"), 400) == excerpt_budget(output("tracebacks.txt"), 400) > 400


def test_a_diff_keeps_every_file_then_the_hunk_headers_then_changed_lines() -> None:
    text = output("diff.txt")
    files = [line for line in text.split("\n") if line.startswith("diff --git ")]
    hunks = [line for line in text.split("\n") if line.startswith("@@ ")]
    small, large = sent(text, 400), sent(text, 1600)
    assert small.startswith("[trimmed: diff of bash, 7,363 chars; kept file and hunk headers, changed lines; ")
    assert all(line in small for line in files)
    assert all(line in large for line in files + hunks)
    assert "+import logging" in large
    assert_excerpt_of(small, text)
    assert_excerpt_of(large, text)


def test_a_log_says_which_levels_it_left_out() -> None:
    text = output("log.txt")
    excerpt = sent(text, 800)
    assert excerpt.startswith("[trimmed: log of bash, 10,612 chars; kept errors, warnings, first and last lines; ")
    assert re.search(r"\[\.\.\. [\d,]+ lines left out: [\d,]+ DEBUG, [\d,]+ INFO \.\.\.\]", excerpt)
    assert excerpt.split("\n")[1] == "<returncode>0</returncode>" and excerpt.endswith("</output_tail>")
    assert_excerpt_of(excerpt, text)


def test_a_log_keeps_its_errors_and_warnings_with_context() -> None:
    lines = [f"2024-05-01 10:00:{i:02d} INFO worker {i % 3} handled request {i}" for i in range(60)]
    lines[31] = "2024-05-01 10:00:31 ERROR worker 1 lost the database connection: timeout after 30s"
    lines[44] = "2024-05-01 10:00:44 WARN worker 2 retrying request 44"
    text = "\n".join(lines)
    excerpt = sent(text)
    assert lines[31] in excerpt and lines[44] in excerpt and lines[30] in excerpt and lines[32] in excerpt
    assert "INFO ...]" in excerpt
    assert "lost the database" not in head_tail(text)


def test_a_table_keeps_its_header_and_counts_rows() -> None:
    text = output("table.txt")
    excerpt = sent(text)
    assert "[L:  1, P:  1]      |file:" in excerpt
    assert re.search(r"\[\.\.\. [\d,]+ rows left out \.\.\.\]", excerpt)
    csv = "id,name,owner,status\n" + "\n".join(f"{i},svc-{i},team-{i % 4},ok" for i in range(200))
    excerpt = sent(csv)
    assert excerpt.split("\n")[1] == "id,name,owner,status" and "table of bash" in excerpt


def test_source_keeps_its_definitions_and_the_calls_focus() -> None:
    text = output("source.txt")
    excerpt = sent(text, 600)
    definitions = [line for line in text.split("\n") if re.match(r"\s*(def|class) ", line)]
    assert definitions and all(line in excerpt for line in definitions)
    assert_excerpt_of(excerpt, text)
    viewed = tool_result("swe-agent__pydicom__pydicom-1458.json", "[File: ")  # SWE-agent's numbered view
    assert classify(viewed.split("\n")).kind == "source"  # type: ignore[union-attr]
    focused = sent(viewed, 600, arguments=json.dumps({"pattern": "read_only"}))
    assert "lines around 'read_only'" in focused
    assert [line for line in viewed.split("\n") if "read_only" in line][0] in focused


def test_json_keeps_its_structure_and_the_length_of_long_arrays() -> None:
    text = tool_result("tau-bench__gpt-4o-airline__task02__trial1.json", '"flight_number"')
    value = json.loads(text)
    excerpt = sent(text)
    marker, _, body = excerpt.partition("\n")
    assert marker.startswith("[trimmed: JSON of bash, 2,835 chars; kept structure, ends of long arrays; ")
    shrunk = json.loads(body)  # still JSON
    assert isinstance(shrunk, list) and shrunk[0] == value[0]
    assert f"{len(value)} in all" in shrunk[1]
    assert shape_json("not json", 400) is None and shape_json("[1, 2", 400) is None


def test_repetitive_output_keeps_the_line_that_breaks_the_pattern() -> None:
    text = script.tool_output(script.tool_command(1, 4))  # the continuity bench's planted fact
    excerpt = sent(text)
    assert "listen_port = 48443" in excerpt and "listen_port" not in head_tail(text)
    install = tool_result(
        "swe-agent__marshmallow-code__marshmallow-1867__default__t-0.20__p-0.95__c-2.00__install-1___install_from_source.json",
        "Obtaining file://",
    )
    assert classify(install.split("\n")) is not None
    assert_excerpt_of(sent(install), install)


def test_text_of_no_kind_is_cut_head_and_tail_at_the_lean_budget() -> None:
    text = "word " * 2000
    assert shape_text(text, 400) is None
    assert sent(text) == head_tail(text, int(400 * LEAN))


def test_quoted_text_is_kept_whatever_the_budget() -> None:
    lines = [f"line {i}: nothing special here" for i in range(300)]
    quote = "\n".join(lines[150:153])
    excerpt = sent("\n".join(lines), 200, quotes=(quote,))
    assert quote in excerpt and "text later calls quote" in excerpt


def test_pick_keeps_must_lines_over_budget_and_renders_gaps() -> None:
    lines = ["a" * 50, "b" * 50, "c" * 50, "d" * 50]
    picked = pick(lines, [FILLER, MUST, FILLER, FILLER], 10)
    assert picked.kept == (1,)
    assert render(lines, picked) == "[... 1 line left out ...]\n" + "b" * 50 + "\n[... 2 lines left out ...]"
    everything = pick(lines, [FILLER] * 4, 10_000)
    assert render(lines, everything) == "\n".join(lines)


def test_over_the_vendored_transcripts_excerpts_cost_less_than_head_tail_and_keep_more_key_lines() -> None:
    # the per-result budgets trade: what key-dense results spend beyond the cap, results with no
    # key line give back (`bench.lossless` measures it on the shared set)
    caps = {400: Retention(), 2000: Retention()}
    for path in sorted((Path(__file__).resolve().parents[1] / "data" / "transcripts").glob("*.json")):
        retention_of(json.loads(path.read_text(encoding="utf-8"))["messages"], caps)
    for into in caps.values():
        assert into.results > 10
        assert into.sent_tokens["type-aware"] < into.sent_tokens["head+tail"]
        kept = {
            how: sum(into.kept[how].get(name, 0) for name in ("failure or error", "path:line", "traceback"))
            for how in into.kept
        }
        assert kept["type-aware"] >= kept["head+tail"]
