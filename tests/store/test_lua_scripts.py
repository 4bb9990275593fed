"""The Redis backend's Lua scripts are package files: every one is loaded, and every one ships."""

from __future__ import annotations

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
