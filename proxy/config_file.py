"""Loading the config file: read the YAML, put the environment into it, validate it once, and
report every problem on a line of its own.

Secrets never live in the file itself. A route names the environment variable that holds its
upstream key (`api_key_env`); `${NAME}` anywhere in a string value is replaced from the
environment when the file is loaded, so the resolved config can be printed without leaking keys
only if keys stay behind `*_env` names (which `check-config` relies on).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from policies.config import SettingError

from .config import Config
from .errors import ConfigError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _interpolate(value: Any, env: dict[str, str], where: str, problems: list[str]) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in env:
                problems.append(f"{where}: environment variable {name} is not set")
                return ""
            return env[name]

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {k: _interpolate(v, env, f"{where}.{k}" if where else str(k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env, f"{where}.{i}", problems) for i, v in enumerate(value)]
    return value


def _cross_references(data: dict[str, Any]) -> list[str]:
    """Route names and policy references, checked on the raw document so that they are reported
    even when field errors stop pydantic before its model validators run."""
    problems: list[str] = []
    policies = data.get("policies")
    known = set(policies) if isinstance(policies, dict) else {"default"}
    names: set[str] = set()
    routes = data.get("routes")
    for index, route in enumerate(routes if isinstance(routes, list) else []):
        if not isinstance(route, dict):
            continue
        name = route.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append(f"routes.{index}.name: duplicate route name {name!r}")
            names.add(name)
        policy = route.get("policy", "default")
        if isinstance(policy, str) and policy not in known:
            defined = ", ".join(sorted(known)) or "none"
            problems.append(f"routes.{index}.policy: unknown policy {policy!r} (defined: {defined})")
    return problems


def _located(err: ErrorDetails) -> tuple[str, str]:
    """(where, what) of one validation error. A `SettingError` from a policy dataclass names
    its field: it joins the location (`policies.default.pins.patterns: invalid regex ...`)."""
    parts = [str(part) for part in err["loc"]]
    msg = err["msg"].removeprefix("Value error, ")
    error = err.get("ctx", {}).get("error")
    if isinstance(error, SettingError) and error.field is not None:
        parts.append(error.field)
        head, sep, rest = msg.partition(": ")
        if sep and head.rsplit(".", 1)[-1] == error.field:
            msg = rest  # "pins.patterns: invalid regex ..." -> "invalid regex ..."
        elif msg.startswith(error.field + " "):
            msg = msg[len(error.field) + 1 :]  # "trigger must be within ..." -> "must be within ..."
    elif err["type"] == "unexpected_keyword_argument":
        msg = "Extra inputs are not permitted"  # a dataclass's wording of a model's extra="forbid"
    return ".".join(parts) or "(top level)", msg


def parse_config(data: Any, source: str = "<config>", env: dict[str, str] | None = None) -> Config:
    """Validate a parsed YAML document; raise ConfigError with one line per problem."""
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: the top level must be a mapping"])
    problems: list[str] = []
    data = _interpolate(data, dict(os.environ) if env is None else env, "", problems)
    if problems:
        raise ConfigError([f"{source}: {p}" for p in problems])
    references = _cross_references(data)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc, msg = _located(err)
            if msg.startswith(("routes.", "duplicate")) and any(msg in r for r in references):
                continue  # the same cross-reference problem, reported once below
            lines.append(f"{source}: {loc}: {msg}")
        raise ConfigError(lines + [f"{source}: {r}" for r in references]) from None
    if references:
        raise ConfigError([f"{source}: {r}" for r in references])
    return config


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = str(exc).replace("<unicode string>", str(path))  # the mark names the file, not the text
        raise ConfigError([f"{path}: invalid YAML: {where}"]) from None
    return parse_config(data, str(path))
