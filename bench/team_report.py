"""BENCHMARKS.md's section of the team-load phase (`bench.team_load`)."""

from __future__ import annotations

from typing import Any

GROUPS = (
    ("all", "all requests"),
    ("plain", "neither detour nor summary wait"),
    ("detour", "recall detours"),
    ("waited", "waited for a summary"),
)


def _f(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}" if isinstance(value, float) else str(value)


def section(report: dict[str, Any]) -> list[str]:
    team = report.get("team_load")
    if not team:
        return []
    rows = team["rows"]
    lines = ["", "## A realistic team load", "", team["setup"] + ".", ""]
    lines += [
        "| store | req | err | req/s | CPU ms/req | RSS peak MB | RSS end MB | loop lag p99 ms | added TTFT p50 ms "
        "| added TTFT p99 ms | waited for a summary | recall rounds | sessions compacted | forks "
        "| loop waited for a CPU |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        a = row["added_ttft"]["all"]
        waited = f"{row['summary_waits']} ({row['summary_waits_not_committed']} not committed)"
        compacted = f"{row['sessions_compacted']} of {team['sessions']} (planned {team['crossing_sessions']})"
        lines.append(
            "| "
            + " | ".join(
                _f(v)
                for v in (
                    row["backend"],
                    row["requests"],
                    row["errors"],
                    row["throughput_rps"],
                    row["cpu_ms_per_request"],
                    row["rss_peak_mb"],
                    row["rss_end_mb"],
                    row["loop_lag_p99_ms"],
                    a["p50_ms"],
                    a["p99_ms"],
                    waited,
                    row["recall_rounds"],
                    compacted,
                    row["forks"],
                    f"{row['runqueue_wait_s']:g} of {row['wall_s']:g} s",
                )
            )
            + " |"
        )
    lines += [
        "",
        "Added time to first token by kind of request (the client's time to its first token minus the "
        "upstream's own; a detour's recall round is upstream time, a summary wait is not):",
        "",
        "| store | "
        + " | ".join(f"{label}: n, p50 / p99 ms" for _, label in GROUPS)
        + " | before upstream p50 / p99 ms |",
        "|---|" + "---|" * (len(GROUPS) + 1),
    ]
    for row in rows:
        cells = [
            f"{g['n']:,}, {_f(g['p50_ms'])} / {_f(g['p99_ms'])}" for g in (row["added_ttft"][k] for k, _ in GROUPS)
        ]
        before = f"{_f(row['before_upstream_p50_ms'])} / {_f(row['before_upstream_p99_ms'])}"
        lines.append(f"| {row['backend']} | " + " | ".join(cells) + f" | {before} |")
    lines += [
        "",
        "CPU: utime+stime of the proxy process (/proc) over the timed requests, compactions and detours "
        "included. Loop lag: `ctxproxy_event_loop_lag_seconds` (a timer sampled ten times a second inside "
        "the proxy) over the timed run, p99 interpolated within its buckets. Waited for a summary: "
        "`ctxproxy_summary_wait_seconds` (the proxy's count); the per-request split above finds them in the "
        "logs (a summary of the session's history that started after the request was sent and ended before "
        "the upstream got it). 'before upstream': from the client's send to the upstream's arrival. 'Loop waited "
        "for a CPU': the proxy's main thread runnable but not running (/proc/PID/schedstat) over the timed run: "
        "lag and added time that come from a machine busy with other work, not from the proxy. Errors: "
        "failed or malformed answers the agents got, warm-up included (goal 0).",
    ]
    for row in rows:
        if row["error_examples"]:
            lines += ["", f"{row['backend']} errors, first {len(row['error_examples'])}:", ""]
            lines += [f"- `{e[:200]}`" for e in row["error_examples"]]
    return lines
