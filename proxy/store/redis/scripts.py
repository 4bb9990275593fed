"""The Lua scripts of the Redis backend: one file each under lua/, every one prefixed with lib.lua.

Each write that must be atomic is one script, run by EVALSHA (redis-py loads it once per server
and reloads it when the server lost its script cache). Every key a script touches comes in KEYS,
all of one conversation's slot (keys.py). The files ship as package data.
"""

from __future__ import annotations

import functools
from importlib import resources

NAMES = (
    "create",
    "append",
    "retract",
    "probe",
    "active",
    "commit",
    "failed",
    "record_call",
    "record_answered",
    "record_orphan",
    "lineage",
    "delete",
    "acquire",
    "renew",
    "release",
    "purge_calls",
    "purge_orphans",
    "purge_cks",
    "memory_put",
    "memory_read",
    "memory_delete",
)


@functools.cache
def sources() -> dict[str, str]:
    """Script name -> its full source (lib.lua first), read once from the package."""
    lua = resources.files(__package__).joinpath("lua")
    lib = lua.joinpath("lib.lua").read_text(encoding="utf-8")
    return {name: lib + lua.joinpath(f"{name}.lua").read_text(encoding="utf-8") for name in NAMES}
