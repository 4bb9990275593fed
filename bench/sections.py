"""Put the sections of a partial run (`python -m bench --only savings --sections`) into
BENCHMARKS.md, leaving the rest of the last full run as it was.

Each `## ` section of the partial report that BENCHMARKS.md also has replaces it whole, under a
line naming the run it comes from; in `## Targets` only the rows the partial run measured are
replaced (by the target's text). Numbers are never edited by hand: they come from the report.

Example: `python -m bench --only savings --sections` after a change to the money model rewrites
"## Savings ..." (with its "### Money" table) and the savings and bill rows of the targets.
"""

from __future__ import annotations

TARGETS = "## Targets"


def _split(markdown: str) -> tuple[str, list[tuple[str, str]]]:
    """(what precedes the first `## ` heading, [(heading line, the section's text after it)])."""
    head, sections = [], []
    for line in markdown.splitlines(keepends=True):
        if line.startswith("## "):
            sections.append([line.rstrip("\n"), ""])
        elif sections:
            sections[-1][1] += line
        else:
            head.append(line)
    return "".join(head), [(h, body) for h, body in sections]


def _row_key(line: str) -> str | None:
    cells = line.split("|")
    return cells[1].strip() if line.startswith("| ") and len(cells) > 2 else None


def _targets(current: str, partial: str) -> str:
    rows = {key: line for line in partial.splitlines(keepends=True) if (key := _row_key(line))}
    return "".join(rows.get(_row_key(line) or "", line) for line in current.splitlines(keepends=True))


def merge(current: str, partial: str, source: str) -> str:
    """`current` with the sections of `partial` put in (see the module docstring); `source`
    names the partial run in a line under each section it replaced."""
    head, sections = _split(current)
    _, fresh = _split(partial)
    new = dict(fresh)
    out = [head]
    for heading, body in sections:
        if heading == TARGETS and heading in new:
            body = _targets(body, new[heading])
        elif heading in new:
            body = f"\n{source}\n" + new[heading]
        out.append(f"{heading}\n{body}")
    return "".join(out)
