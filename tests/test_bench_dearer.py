"""The money table and `python -m bench.dearer` follow the default, `summarizer.mode: auto`
(`shared` for the bench's policy), with `mode: text` a named variant beside it: the rows of
`bench.savings.money_summary`, their rendering (`bench.report`) and targets (`bench.targets`),
the dearer runs listed per mode and one run's requests priced per mode."""

from __future__ import annotations

from typing import Any

import pytest

from bench import dearer, savings
from bench.bodies import VENDORED
from bench.report import render
from bench.savings import MONEY_MODELS, money_of, money_summary
from bench.targets import targets
from proxy.catalog import ModelCatalog
from proxy.policy_settings import Policy
from proxy.projector import Projector
from proxy.replay import load_transcript, replay

KATY = VENDORED / "swe-agent__ctf__crypto__katy.json"
"""a vendored run that compacts at 8k, once as a shared call (tests/test_bench_money.py)"""


def _bill(dollars: float) -> dict[str, Any]:
    return {"dollars": dollars, "uncached": 0, "cache_read": 0, "cache_write": 0, "summarizer_dollars": 0.0}


def _run(name: str, auto: float, text: float, over: int | None = None) -> dict[str, Any]:
    """A replayed run at 8k whose bill without ctxproxy is $1 for each model."""
    money: dict[str, Any] = {"baseline_over_from": over}
    for model in MONEY_MODELS:
        money[model] = {
            "with": _bill(auto),
            "with_text": _bill(text),
            "with_small_summarizer": text / 2,
            "without": _bill(1.0),
        }
    return {
        "name": name,
        "window": 8000,
        "turns": 3,
        "sent_tokens": 1,
        "client_tokens": 1,
        "prefix_reuse": 0.5,
        "baseline_prefix_reuse": 0.5,
        "compactions": 1,
        "money": money,
    }


RUNS = [_run("dearer-in-auto", 1.2, 0.9), _run("dearer-in-text", 0.8, 1.1, over=5), _run("cheaper", 0.5, 0.6)]


def test_the_money_rows_headline_is_the_default_and_text_mode_a_variant():
    row = money_summary(RUNS, [8000])[0]
    assert (row["bill_with"], row["bill_ratio"], row["worst_run_bill_ratio"]) == (2.5, 0.833, 1.2)
    assert (row["runs_dearer"], row["fitting_runs_dearer"]) == (1, 1)
    assert (row["bill_with_text"], row["bill_ratio_text"], row["worst_run_text"]) == (2.6, 0.867, 1.1)
    assert (row["runs_dearer_text"], row["fitting_runs_dearer_text"]) == (1, 0)  # the text-dearer run is over
    assert (row["bill_ratio_small_summarizer"], row["runs_dearer_small_summarizer"]) == (0.433, 0)
    assert not [key for key in row if "shared" in key]  # shared is the headline, not a column


def test_the_money_table_renders_the_default_and_names_text_mode():
    meta = {"mode": "full", "command": "python -m bench", "date": "now", "machine": "m", "duration_s": 1, "run": "r"}
    summary = [{"window": 8000, "group": "all runs", "runs": 3}]
    md = render({"meta": meta, "savings": {"summary": summary, "money": money_summary(RUNS, [8000])}})
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| window | model | runs | client over window"))
    row = next(line for line in lines if line.startswith("| 8,000 | claude-sonnet-4 "))
    cells = dict(zip(header.split("|"), row.split("|"), strict=True))
    assert (cells[" ratio "], cells[" ratio mode: text "], cells[" runs dearer text "]) == (" 0.83 ", " 0.87 ", " 1 ")
    assert " bill with (auto) $ " in cells and " ratio shared " not in cells
    assert "`summarizer.mode: auto`" in md


def test_the_bill_targets_are_the_defaults():
    rows = targets({"savings": {"money": money_summary(RUNS, [8000])}})
    bill = next(t for t in rows if t["target"] == "bill with ctxproxy <= without (claude-sonnet-4, 8,000)")
    assert bill["met"] is False
    assert bill["detail"].startswith("summarizer.mode auto: $2.50 vs $3.00 (0.833x); worst run 1.200x; 1 of 3")


def test_dearer_lists_the_runs_dearer_in_the_mode_asked():
    result = {"runs": RUNS, "money": money_summary(RUNS, [8000])}
    auto = "\n".join(dearer.dearer_lines(result, ["claude-sonnet-4"], "auto"))
    text = "\n".join(dearer.dearer_lines(result, ["claude-sonnet-4"], "text"))
    assert "summarizer.mode auto: bill 0.833x" in auto and "1.2000x dearer-in-auto" in auto
    assert "dearer-in-text" not in auto
    assert "summarizer.mode text: bill 0.867x" in text and "1.1000x dearer-in-text" in text
    assert "dearer-in-auto" not in text and "(0 that fit the window)" in text
    assert "gpt-4.1" not in auto


@pytest.fixture
def katy_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replays read one vendored run, whichever transcript set is installed."""
    monkeypatch.setattr(savings, "transcript_files", lambda: [KATY])


def _last_ratio(lines: list[str]) -> str:
    return lines[-1].rsplit("|", 1)[1].strip()


@pytest.mark.usefixtures("katy_only")
def test_a_runs_requests_are_priced_in_the_mode_asked():
    """`--run`: in auto the compaction's row carries the shared call's dollars, in text the own
    summarizer's; every other request is the same; the bill so far ends at the run's bill."""
    auto = dearer.request_rows(8000, "katy", "claude-sonnet-4")
    text = dearer.request_rows(8000, "katy", "claude-sonnet-4", "text")
    assert auto[0].endswith("summarizer.mode auto") and text[0].endswith("summarizer.mode text")
    differ = [a for a, b in zip(auto[2:], text[2:], strict=True) if a != b]
    assert differ and " C |" in differ[0]
    messages, tools, _ = load_transcript(str(KATY))
    report = replay(messages, tools, Policy(context_window=8000), "gpt-4o", Projector(ModelCatalog()))
    bills = money_of(report)["claude-sonnet-4"]
    without = bills["without"]["dollars"]
    assert _last_ratio(auto) == f"{bills['with']['dollars'] / without:.3f}x"
    assert _last_ratio(text) == f"{bills['with_text']['dollars'] / without:.3f}x"


@pytest.mark.usefixtures("katy_only")
def test_the_command_takes_a_mode(capsys: pytest.CaptureFixture[str]):
    assert dearer.main(["--windows", "8000", "--run", "katy", "--mode", "text"]) == 0
    assert "katy at 8,000, claude-sonnet-4, summarizer.mode text" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        dearer.main(["--mode", "shared"])


def test_a_generated_session_is_a_run_too():
    names = [name for name, _, _ in savings.replay_inputs(0, dearer.SESSIONS)]
    assert names == ["generated-300-turns", "generated-300-turns-results>=1500", "generated-300-turns-results>=5000"]
