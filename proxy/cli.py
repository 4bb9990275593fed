"""The `ctxproxy` command: `serve` runs the proxy, `check-config` validates a config file and prints
what it resolves to, `doctor` checks a config against the live world (`proxy.doctor`), `replay`
runs saved conversations through a policy offline (`proxy.replay`), `migrate-store` copies a SQLite
or Redis store into PostgreSQL (`proxy.store.migrate`)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys

from .config import Config
from .config_file import load_config
from .credentials import resolve_keys
from .describe import banner, describe
from .errors import ConfigError, StoreError
from .store import make_store, store_problem

log = logging.getLogger("ctxproxy")


def _load(path: str, secrets: bool = True) -> Config | None:
    """The config, or None after printing one line per problem to stderr."""
    try:
        config = load_config(path)
        problems = []
        problem = store_problem(config.store)
        if problem is not None:
            problems.append(f"store: {problem}")
        if secrets:
            try:
                resolve_keys(config)
            except ConfigError as exc:
                problems.extend(exc.problems)
        if problems:
            raise ConfigError([f"{path}: {p}" for p in problems])
    except ConfigError as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return None
    return config


def check_config(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        return 1
    print("\n".join(describe(config)))
    return 0


def doctor_command(args: argparse.Namespace) -> int:
    from .doctor import diagnose

    config = _load(args.config)
    if config is None:
        return 1
    checks = asyncio.run(diagnose(config, resolve_keys(config)))
    for check in checks:
        print(check.line())
    return 1 if any(check.verdict == "FAIL" for check in checks) else 0


def serve(args: argparse.Namespace) -> int:
    from .serving.app import create_app
    from .serving.server import run, run_workers
    from .serving.workers import prepare as prepare_workers

    config = _load(args.config)
    if config is None:
        return 1
    problem = asyncio.run(_store_reachable(config.store))
    if problem is not None:
        print(f"{args.config}: store: {problem}", file=sys.stderr)
        return 1
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    admin_on = resolve_keys(config).admin_token is not None

    def announce(url: str) -> None:
        for line in banner(config, url, admin_on, _version()):
            log.info("%s", line)

    if args.workers > 1:  # uvicorn spawns the workers; each builds its app from the config file
        try:
            factory = prepare_workers(args.config, config, args.log_level)
        except ConfigError as exc:
            print("\n".join(exc.problems), file=sys.stderr)
            return 1
        announce(f"http://{host}:{port}")
        run_workers(config, factory, args.workers, host, port, args.log_level, args.access_log)
    else:
        app = create_app(config, config_path=os.path.abspath(args.config))
        run(config, app, host, port, args.log_level, args.access_log, announce)
    return 0


async def _store_reachable(url: str) -> str | None:
    """Why the store cannot be opened (one line: a Redis that does not answer), or None. Checked
    before serving, so that it is said once and plainly, not as the lifespan's traceback."""
    store = make_store(url)
    try:
        await store.open()
    except StoreError as exc:
        return f"cannot be opened: {exc}"
    await store.close()
    return None


def replay_command(args: argparse.Namespace) -> int:
    import json

    from .catalog import ModelCatalog
    from .projector import Projector
    from .replay import load_transcript, render_report, replay

    config = _load(args.config, secrets=False)
    if config is None:
        return 1
    name = args.policy or config.routes[0].policy
    if name not in config.policies:
        defined = ", ".join(sorted(config.policies))
        print(f"{args.config}: no policy named {name!r} (defined: {defined})", file=sys.stderr)
        return 1
    policy = config.policies[name]
    if args.window:
        try:
            policy = dataclasses.replace(policy, context_window=args.window)
        except ValueError as exc:  # pydantic's ValidationError is one
            print(f"--window {args.window}: {exc}", file=sys.stderr)
            return 1
    projector = Projector(ModelCatalog())
    reports = []
    for path in args.files:
        try:
            messages, tools, title = load_transcript(path)
        except (OSError, ValueError, KeyError) as exc:
            print(f"{path}: cannot read a transcript: {exc}", file=sys.stderr)
            return 1
        report = replay(messages, tools, policy, args.model, projector, name=title)
        reports.append(report)
        if not args.json:
            print(render_report(report, args.per_turn))
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    elif len(reports) > 1:
        client = sum(r.client_total for r in reports)
        sent = sum(r.sent_total for r in reports)
        print(
            f"total: {len(reports)} transcripts, client {client:,} tokens -> sent {sent:,} "
            f"({1 - sent / client if client else 0:.1%} saved)"
        )
    return 0


def migrate_store_command(args: argparse.Namespace) -> int:
    """Copy one store into another, printing progress and a summary; 1 when it failed or the
    verification found a difference (a bad URL is one line, never a traceback)."""
    from .store.migrate import migrate_store, where

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        say(f"migrating {where(args.source)} -> {where(args.target)}")
        report = asyncio.run(migrate_store(args.source, args.target, say))
    except StoreError as exc:
        print(f"migrate-store: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # committed batches stay; the open one was rolled back
        print("migrate-store: interrupted; run the same command again to continue", file=sys.stderr)
        return 130
    copied = ", ".join(f"{table} {n}" for table, n in sorted(report.copied.items()) if n) or "nothing"
    say(f"copied: {copied}")
    say(f"already in the target: {report.skipped_conversations} conversations")
    for problem in report.problems:
        print(f"MISMATCH {problem}", file=sys.stderr)
    if report.problems:
        say(f"FAILED: {len(report.problems)} differences between the stores")
        return 1
    say(f"verified: {report.verified_conversations} conversations match (counts and digests)")
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxproxy")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    """The command line: every command and option with its help."""
    parser = argparse.ArgumentParser(prog="ctxproxy", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ctxproxy {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_serve = sub.add_parser("serve", help="run the proxy", description="Run the proxy on the config's address.")
    p_serve.add_argument("--config", required=True, help="the YAML config file (see config.example.yaml)")
    p_serve.add_argument("--host", help="address to listen on (default: the config's server.host)")
    p_serve.add_argument("--port", type=int, help="port to listen on (default: the config's server.port)")
    p_serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="what the console shows (default: info)",
    )
    p_serve.add_argument("--access-log", action="store_true", help="uvicorn's access log line per HTTP request")
    p_serve.add_argument("--workers", type=_positive, default=1, help="processes on one socket and one store")
    p_serve.set_defaults(func=serve)
    p_check = sub.add_parser(
        "check-config",
        help="validate a config file and print what it resolves to",
        description="Validate a config file without starting anything; one line per problem, exit 1 if any.",
    )
    p_check.add_argument("config", help="the YAML config file")
    p_check.set_defaults(func=check_config)
    p_doctor = sub.add_parser(
        "doctor",
        help="check a config against the live world: store, upstreams and their keys, summarizers, windows",
        description="Check a config against the live world, one line per check (ok, warn, FAIL); exit 1 if any failed.",
    )
    p_doctor.add_argument("config", help="the YAML config file")
    p_doctor.set_defaults(func=doctor_command)
    p_replay = sub.add_parser(
        "replay",
        help="run saved conversations through a policy offline and report tokens",
        description="Run saved conversations through a policy offline and report what would be sent.",
    )
    p_replay.add_argument("files", nargs="+", help="JSON: a list of OpenAI messages, or {messages, tools}")
    p_replay.add_argument("--config", required=True, help="the YAML config file whose policy to use")
    p_replay.add_argument("--policy", help="policy name (default: the first route's)")
    p_replay.add_argument("--model", default="gpt-4o", help="model whose tokenizer and window to use")
    p_replay.add_argument("--window", type=int, help="override the policy's context_window")
    p_replay.add_argument("--per-turn", action="store_true", help="a line per turn, not only the totals")
    p_replay.add_argument("--json", action="store_true", help="the reports as JSON")
    p_replay.set_defaults(func=replay_command)
    p_migrate = sub.add_parser(
        "migrate-store",
        help="copy a SQLite or Redis store into PostgreSQL, keeping every id and hash; resumable, verified",
        description="Copy a store into PostgreSQL (docs/storage.md): idempotent, resumable, verified by "
        "counts and digests per conversation; exit 1 on any difference.",
    )
    p_migrate.add_argument(
        "--from",
        dest="source",
        required=True,
        help="the store to copy: sqlite:///PATH, redis://... or redis+cluster://...",
    )
    p_migrate.add_argument("--to", dest="target", required=True, help="postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    p_migrate.set_defaults(func=migrate_store_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        result: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # `ctxproxy check-config ... | head`: the reader left; say nothing more, as other tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return result


if __name__ == "__main__":
    sys.exit(main())
