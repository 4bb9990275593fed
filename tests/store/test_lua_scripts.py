"""The Redis backend's Lua scripts are package files: every one is loaded, and every one ships."""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path

from proxy.store.redis import scripts

REPO = Path(__file__).resolve().parent.parent.parent


def test_every_lua_file_is_a_loaded_script() -> None:
    lua = resources.files("proxy.store.redis").joinpath("lua")
    files = {entry.name.removesuffix(".lua") for entry in lua.iterdir() if entry.name.endswith(".lua")}
    assert files - {"lib"} == set(scripts.NAMES)
    sources = scripts.sources()
    lib = lua.joinpath("lib.lua").read_text(encoding="utf-8")
    assert all(source.startswith(lib) and len(source) > len(lib) for source in sources.values())


def test_the_lua_files_are_package_data() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "lua/*.lua" in config["tool"]["setuptools"]["package-data"]["proxy.store.redis"]


KEY_NAMES = {"CONV", "BRANCHES", "BLIST", "EVENTS", "CHAIN", "CKS", "CKLIST", "CALLS", "RECORDS", "LAST", "LEASES"}
KEY_NAMES |= {"CONVS", "TOMBSTONES", "CALL_INDEX", "CKS_RETIRED"}


def test_every_key_a_script_touches_comes_from_keys() -> None:
    """Redis Cluster routes a script by its KEYS: a key name built from a value would reach
    another slot. Every command's key argument is KEYS[...] or one of lib.lua's names for them
    (`ext` is KEYS[16]; `unpack(KEYS, 2)`: every key given from the second on)."""
    lua = resources.files("proxy.store.redis").joinpath("lua")
    lib = lua.joinpath("lib.lua").read_text(encoding="utf-8")
    named = set()
    for names, _keys in re.findall(r"local (\w+(?:, \w+)*) = (KEYS\[\d+\](?:, KEYS\[\d+\])*)", lib):
        named |= set(names.split(", "))
    assert named == KEY_NAMES
    for entry in lua.iterdir():
        if not entry.name.endswith(".lua"):
            continue
        source = entry.read_text(encoding="utf-8")
        for command, key in re.findall(r"redis\.call\('([A-Z]+)'(?:, ([^,)]+))?", source):
            if command == "TIME":
                continue
            assert (
                key in KEY_NAMES
                or re.fullmatch(r"KEYS\[(\d+|i)\]", key)
                or (key == "ext" and "KEYS[16]" in source)
                or key == "unpack(KEYS"
            ), (
                entry.name,
                command,
                key,
            )
