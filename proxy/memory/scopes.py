"""Which memory scopes a request has: `project:<key>`, `user:<client name>`, `tenant`.

Problem: an unmodified agent does not say which project it works on, but it says where it
works. The project key comes from the first source of the route's `memory.project.sources`
that yields one:

* `header`: the request header (`X-Ctxproxy-Project` by default), for clients that can set one
  (the SDKs' `default_headers`, a gateway in front of the agent);
* `workspace`: the working directory the agent states in its first messages --
  Claude Code: `Primary working directory: /path` in the environment section of its system
  prompt (or the environment it sends as a system message or `<system-reminder>`);
  Codex: `<cwd>/path</cwd>` in the `<environment_context>` user item before the first prompt;
  pi: `Current working directory: /path` at the end of its system prompt;
* `system`: the route's `memory.project.pattern`, a regex over the system prompt (its first
  group, else the whole match).

`user:` is the `clients:` name the request authenticated as (none for a key that is only
forwarded); `tenant` is always there. A scope's value is a key, never a path to read: it is cut
to 200 characters, control characters dropped, a trailing slash removed.

Example: Claude Code in /srv/app with client key `alice`, scopes [project, user] ->
("project:/srv/app", "user:alice"); without a client key -> ("project:/srv/app",).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.text import message_text

from ..tool_settings import Memory
from ..types import Message

MAX_KEY_CHARS = 200
WORKSPACE_PATTERNS = (
    re.compile(r"Primary working directory:[ \t]*`?([^\n`]+?)`?[ \t]*$", re.M),  # Claude Code
    re.compile(r"<cwd>([^<\n]+)</cwd>"),  # Codex
    re.compile(r"Current working directory:[ \t]*([^\n]+?)[ \t]*$", re.M),  # pi
)
FIRST_MESSAGES = 4
"""Where agents state their workspace: the system prompt and the first messages of the history."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Scopes:
    """The request's scopes in the route's order (the first is where `save` goes by default),
    and where the project key came from."""

    names: tuple[str, ...]
    project_from: str | None = None

    def __bool__(self) -> bool:
        return bool(self.names)

    @property
    def default(self) -> str:
        return self.names[0]

    def of(self, kind: str) -> str | None:
        """The request's scope of a kind (`project`, `user`, `tenant`), None when it has none."""
        for name in self.names:
            if name == kind or name.startswith(kind + ":"):
                return name
        return None


def scopes_of(
    settings: Memory,
    client: str | None,
    headers: Mapping[str, str],
    prefix: Sequence[Message],
    history: Sequence[Message],
) -> Scopes:
    """The scopes of one request (see the module docstring)."""
    names: list[str] = []
    project_from = None
    for kind in settings.scopes:
        if kind == "tenant":
            names.append("tenant")
        elif kind == "user" and client:
            names.append(f"user:{client}")
        elif kind == "project":
            found = project_key(settings, headers, prefix, history)
            if found is not None:
                project_from, key = found
                names.append(f"project:{key}")
    return Scopes(tuple(names), project_from)


def project_key(
    settings: Memory, headers: Mapping[str, str], prefix: Sequence[Message], history: Sequence[Message]
) -> tuple[str, str] | None:
    """(source, key) of the first source that yields a project key."""
    system = "\n".join(message_text(m) for m in prefix)
    for source in settings.project.sources:
        value: str | None = None
        if source == "header":
            value = headers.get(settings.project.header.lower())
        elif source == "workspace":
            value = workspace(system, history)
        elif settings.project.pattern is not None:
            match = re.search(settings.project.pattern, system)
            if match is not None:
                value = match.group(1) if match.re.groups else match.group(0)
        key = normalized(value)
        if key:
            return source, key
    return None


def workspace(system: str, history: Sequence[Message]) -> str | None:
    """The working directory an agent states in its system prompt or first messages."""
    texts = [system, *(message_text(m) for m in history[:FIRST_MESSAGES])]
    for pattern in WORKSPACE_PATTERNS:
        for text in texts:
            match = pattern.search(text)
            if match is not None:
                return match.group(1)
    return None


def normalized(value: str | None) -> str | None:
    if value is None:
        return None
    key = _CONTROL.sub("", value).strip()[:MAX_KEY_CHARS]
    if len(key) > 1:
        key = key.rstrip("/") or "/"
    return key or None
