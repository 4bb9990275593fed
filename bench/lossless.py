"""Lossless first, measured offline (issue 32): how much of the tool output agents send is repeated,
how much of it the projection removes without losing a byte, and which key lines survive trimming.

    python -m bench.lossless [--json results.json] [--record]

Over every shared transcript (`bench.bodies.transcript_files`: the shared set, else the vendored
one) and generated sessions (`bench.bodies.generated_session`: real tool call/result pairs cycled,
so repeated by construction, reported apart):

1. repeats: the tool-result tokens (o200k, text only) whose result is identical to a later one in
   the history (`exact`), or the same call (tool and arguments) as a later one a few lines apart
   (`near`: `policies.repeats.near_repeat`); and what the projection of the whole history removes
   losslessly (the tokens of the results it sends as repeat or near-repeat markers, less the
   markers): trimming forced (`late_trim` 0.001), a 1M window so nothing is summarized or pruned,
   the default `tool_results` and a tighter one (2 recent groups, boundary every 2);
2. key lines: of every tool result longer than a cap (400 = `old_max_chars`, 2,000, 8,000 =
   `recent_max_chars`), the lines a reader needs (`KEY`: failures and errors, `path:line`
   references, and each traceback's last frame and exception line; lines that read as source
   code, `CODE`, excepted; a traceback's header and earlier frames reported apart) that are
   still there whole after head + tail (the
   trimming before issue 32) and after type-aware trimming (no repeats: each result alone), and
   what each sends, in tokens.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.bodies import generated_session, transcript_files
from policies.base import Budget, Item
from policies.config import PolicyConfig, ToolResultsConfig
from policies.groups import group_items
from policies.later import call_of, canonical
from policies.projection import project
from policies.repeats import near_repeat
from policies.text import content_text
from policies.tokens import count_message, count_text, encoding_for_model
from policies.trim_result import Shaping, shape_message, trim_message
from policies.trim_tool_results import REPEAT_MIN_CHARS

ENC = encoding_for_model("gpt-4o")
RESULTS = Path(__file__).resolve().parent / "LOSSLESS.md"
"""`--record` writes here; `python -m bench` appends it to BENCHMARKS.md (`bench.report`)"""
HEADING = "## Lossless first: repeats and type-aware trimming (`python -m bench.lossless`, issue 32)"
KEPT = "### Before and after"
CAPS = (400, 2000, 8000)
KEY = {
    "failure or error": re.compile(
        r"\b(?:FAILED|FAIL|ERROR|FATAL)\b|^E\s{2,}\S|^[\w.]*(?:Error|Exception)\b:|\b(?:error|fatal)(?:\[\w+\])?: "
        r"|\b\d+ (?:failed|errors?)\b|panicked at"
    ),
    "path:line": re.compile(r"[\w./-]+\.\w{1,6}:\d+"),
}
TRACEBACK = "Traceback (most recent call last)"
FRAME = re.compile(r'^\s*File "[^"]+", line \d+')
CODE = re.compile(r"^\s*(?:except|raise|if|elif|return|assert|def|class|for|while|with|#|//|\w+\s*=[^=]|[\w.]+\()")
"""a line that reads as source code (`except KeyError:`, `log.info("FAILED")`): not a key line"""
FORCED = PolicyConfig(trigger=0.001, target=0.0005, late_trim=0.001)
TIGHT = replace(FORCED, tool_results=ToolResultsConfig(keep_recent_groups=2, clear_at_least=2))
BIG = Budget(1_000_000, 16_000, 0)


DISTANCES = ("short", "1-3", "4-6", "7-12", "13+")


def span_of(groups: int) -> str:
    return "1-3" if groups <= 3 else "4-6" if groups <= 6 else "7-12" if groups <= 12 else "13+"


def tokens(text: str) -> int:
    return count_text(text, ENC)


@dataclass
class Repeats:
    runs: int = 0
    results: int = 0
    result_tokens: int = 0
    exact_tokens: int = 0
    near_tokens: int = 0
    removed: dict[str, int] = field(default_factory=lambda: {"default": 0, "tight": 0})
    sent_as: dict[str, int] = field(default_factory=lambda: {"default": 0, "tight": 0})
    distance: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DISTANCES, 0))
    """exact-repeat tokens by how many groups later the nearest twin is (`short`: results of at most
    `REPEAT_MIN_CHARS`, which a marker would not make shorter)"""

    def share(self, n: int) -> str:
        return f"{n:,} ({n / self.result_tokens:.1%})" if self.result_tokens else "-"

    def row(self, name: str) -> str:
        removed = {how: f"{self.share(self.removed[how])} in {self.sent_as[how]:,}" for how in self.removed}
        distance = ", ".join(f"{span} {self.distance[span]:,}" for span in DISTANCES)
        return (
            f"| {name} | {self.runs} | {self.results:,} | {self.result_tokens:,} | {self.share(self.exact_tokens)}"
            f" ({distance}) | {self.share(self.near_tokens)} | {removed['default']} | {removed['tight']} |"
        )


def items_of(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Item]]:
    prefix = [m for m in messages[:1] if m.get("role") == "system"]
    rest = messages[len(prefix) :]
    if rest and rest[-1].get("role") == "assistant" and not rest[-1].get("tool_calls"):
        rest = rest[:-1]  # the last request ends before the final answer
    return prefix, [Item(i + 1, m, count_message(m, ENC)) for i, m in enumerate(rest)]


def repeats_of(messages: Sequence[dict[str, Any]], into: Repeats) -> None:
    prefix, items = items_of(messages)
    results: list[tuple[int, str, str, str]] = []  # group index, tool, canonical arguments, text
    for index, group in enumerate(group_items(items)):
        for item in group.items[1:] if group.kind == "tool_call" else ():
            tool, arguments = call_of(group, str(item.message.get("tool_call_id", "")))
            results.append((index, tool, canonical(arguments), content_text(item.message.get("content"))))
    into.runs += 1
    for k, (index, tool, arguments, text) in enumerate(results):
        size = tokens(text)
        into.results += 1
        into.result_tokens += size
        later = results[k + 1 :]
        twins = [at for at, *_, other in later if other == text]
        if text and twins:
            into.exact_tokens += size
            span = "short" if len(text) <= REPEAT_MIN_CHARS else span_of(twins[0] - index)
            into.distance[span] += size
            continue
        same = [other for _, t, a, other in later if t == tool and a == arguments and other]
        if same and near_repeat(same[-1], text) is not None:
            into.near_tokens += size
    originals = {item.seq: item.message for item in items}
    for name, config in (("default", FORCED), ("tight", TIGHT)):
        projection = project(prefix, items, None, BIG, config, lambda m: count_message(m, ENC))
        sent = {str(m.get("tool_call_id")): m for m in projection.messages if m.get("role") == "tool"}
        for entry in projection.record.trimmed:
            if entry.how in ("repeat", "near-repeat"):
                message = sent[entry.tool_call_id]
                into.removed[name] += count_message(originals[entry.seq], ENC) - count_message(message, ENC)
                into.sent_as[name] += 1


@dataclass
class Retention:
    results: int = 0
    keys: dict[str, int] = field(default_factory=dict)
    kept: dict[str, dict[str, int]] = field(default_factory=lambda: {"head+tail": {}, "type-aware": {}})
    sent_tokens: dict[str, int] = field(default_factory=lambda: {"head+tail": 0, "type-aware": 0})


def key_lines(text: str) -> dict[str, list[str]]:
    """The key lines of `text` by kind (`KEY`; a Python traceback's last frame and exception line
    as `traceback`), and its header and earlier frames apart (`earlier frames`: reported, not
    counted as key lines)."""
    out: dict[str, list[str]] = {name: [] for name in (*KEY, "traceback", "earlier frames")}
    lines = text.split("\n")
    in_traceback: set[int] = set()
    for i, line in enumerate(lines):
        if TRACEBACK not in line:
            continue
        j, frames = i + 1, []
        while j < len(lines) and (lines[j].startswith((" ", "\t")) or not lines[j]):
            if FRAME.match(lines[j]):
                frames.append(j)
            j += 1
        ends = [*frames[-1:], *([j] if j < len(lines) else [])]
        out["traceback"] += [lines[k] for k in ends]
        out["earlier frames"] += [lines[k] for k in (i, *frames[:-1])]
        in_traceback.update(range(i, j + 1))
    for i, line in enumerate(lines):
        if i in in_traceback or CODE.match(line):
            continue
        for name, pattern in KEY.items():
            if pattern.search(line):
                out[name].append(line)
    return out


def retention_of(messages: Sequence[dict[str, Any]], caps: dict[int, Retention]) -> None:
    _, items = items_of(messages)
    for group in group_items(items):
        for item in group.items[1:] if group.kind == "tool_call" else ():
            text = content_text(item.message.get("content"))
            tool, arguments = call_of(group, str(item.message.get("tool_call_id", "")))
            for cap, into in caps.items():
                if len(text) <= cap:
                    continue
                plain = trim_message(item.message, max_chars=cap, head_ratio=0.5, tool_name=tool, seq=item.seq)
                spec = Shaping(item.seq, tool, arguments, cap, "type-aware", 0.5, None)
                aware = shape_message(item.message, spec)
                outputs = {"head+tail": plain, "type-aware": aware}
                into.results += 1
                wanted = key_lines(text)
                for how, out in outputs.items():
                    sent = content_text(out[0].get("content")) if out is not None else text
                    into.sent_tokens[how] += tokens(sent)
                    lines = set(sent.split("\n"))
                    for name, found in wanted.items():
                        into.kept[how][name] = into.kept[how].get(name, 0) + sum(1 for line in found if line in lines)
                for name, found in wanted.items():
                    into.keys[name] = into.keys.get(name, 0) + len(found)


def record(lines: Sequence[str]) -> None:
    """Write the tables to `RESULTS` under its heading, keeping what follows `KEPT` there (the
    hand-written note on the other benches' before and after)."""
    kept = ""
    if RESULTS.exists():
        text = RESULTS.read_text(encoding="utf-8")
        at = text.find(KEPT)
        kept = text[at:] if at >= 0 else ""
    RESULTS.write_text("\n".join([HEADING, "", *lines, "", kept.rstrip()]).rstrip() + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write the numbers here too")
    parser.add_argument("--record", action="store_true", help=f"write the tables to {RESULTS.name} (for BENCHMARKS.md)")
    args = parser.parse_args(argv)
    started = time.time()
    corpora: dict[str, list[list[dict[str, Any]]]] = {
        "transcripts": [json.loads(path.read_text(encoding="utf-8"))["messages"] for path in transcript_files()],
        "generated (cycled pairs)": [generated_session(300, size)["messages"] for size in (0, 1500, 5000)],
    }
    repeats = {name: Repeats() for name in corpora}
    retention = {cap: Retention() for cap in CAPS}
    for name, runs in corpora.items():
        for messages in runs:
            repeats_of(messages, repeats[name])
            if name == "transcripts":
                retention_of(messages, retention)
    lines = [
        f"`python -m bench.lossless` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        f" ({time.time() - started:.0f} s); tokens: o200k.",
        "",
        "| corpus | runs | tool results | tool-result tokens | exact repeats (by groups to the nearest twin)"
        " | near repeats | removed losslessly, default (results sent as markers)"
        " | removed losslessly, 2 recent groups |",
        "|---|---|---|---|---|---|---|---|",
        *(repeats[name].row(name) for name in corpora),
        "",
        "| cap (chars) | results over it | key lines | head + tail keeps (by kind, earlier frames apart)"
        " | type-aware keeps | tokens sent head + tail | type-aware |",
        "|---|---|---|---|---|---|---|",
    ]
    for cap, into in retention.items():
        counted = (*KEY, "traceback")
        total = sum(into.keys.get(name, 0) for name in counted)
        kept = {how: sum(into.kept[how].get(name, 0) for name in counted) for how in into.kept}
        detail = {
            how: "; ".join(
                f"{name} {into.kept[how].get(name, 0)}/{into.keys.get(name, 0)}"
                for name in (*counted, "earlier frames")
            )
            for how in into.kept
        }
        share = {how: f"{kept[how] / max(total, 1):.1%} ({detail[how]})" for how in kept}
        lines.append(
            f"| {cap:,} | {into.results:,} | {total:,} | {share['head+tail']} | {share['type-aware']}"
            f" | {into.sent_tokens['head+tail']:,} | {into.sent_tokens['type-aware']:,} |"
        )
    print("\n".join(lines))
    if args.record:
        record(lines)
    out = {
        "repeats": {name: vars(value) for name, value in repeats.items()},
        "retention": {cap: vars(value) for cap, value in retention.items()},
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
