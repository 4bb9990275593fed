"""The shape of the product code, read from its source (AST, nothing imported):

- no import cycle among the modules of `proxy/` and `policies/`, imports under
  `if TYPE_CHECKING:` included (a cycle closed only for the type checker is still a cycle in the
  design);
- the pure core of `policies/` never imports its memo (`policies.memo`), nor anything of the proxy;
- no product module imports a `_private` name from another module, and no module of `proxy/` or
  `policies/` is longer than 500 lines (STYLE: "rarely over 500");
- every `proxy/...` and `policies/...` path README.md names exists (its architecture walk-through
  is how a newcomer finds the code).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("proxy", "policies")
MAX_LINES = 500


def _modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `packages` (the product's by default)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()
BENCH = _modules(("bench",))
SOURCES = {**MODULES, **BENCH}  # every module `imports` reads


def _is_package(name: str) -> bool:
    return SOURCES[name].name == "__init__.py"


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an `ImportFrom` in `module` names (relative levels resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module):
        base = base[:-1]  # a module's level 1 is its package
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(module: str) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every import statement in `module`,
    wherever it is (top level, `if TYPE_CHECKING:`, inside functions)."""
    tree = ast.parse(SOURCES[module].read_text(encoding="utf-8"))
    found: list[tuple[str, str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, "", node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in SOURCES:
                    found.append((submodule, "", node.lineno))  # `from . import identify`
                else:
                    found.append((target, alias.name, node.lineno))
    return found


def import_graph() -> dict[str, set[str]]:
    """Product module -> the product modules it imports."""
    return {
        module: {target for target, _, _ in imports(module) if target in MODULES and target != module}
        for module in MODULES
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if state.get(root):
            continue
        path = [root]
        stack = [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append(iter(sorted(graph[child])))
    return None


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_type_checking_imports_are_seen() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from policies.draft import Draft\n"
    tree = ast.parse(source)
    nodes = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert [node.module for node in nodes] == ["typing", "policies.draft"]


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_pure_core_does_not_know_its_memo_or_the_proxy() -> None:
    offenders = [
        f"{module} imports {target}"
        for module in MODULES
        if module.startswith("policies") and not module.startswith("policies.memo")
        for target, _, _ in imports(module)
        if target.startswith(("policies.memo", "proxy"))
    ]
    assert offenders == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_attributes(source: str) -> list[str]:
    """`line: expression` for every `x._name` in `source` whose `x` is not `self` or `cls`."""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and _private(node.attr)
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


def test_the_private_attribute_finder_finds_them() -> None:
    source = "store._write(f)\nstore._checkpointer.stop()\nself._db\ncls._cache\nobj.__class__\nstore.db\n"
    assert private_attributes(source) == ["1: store._write", "2: store._checkpointer"]


def test_whole_tree_no_private_names_imported_from_other_modules() -> None:
    offenders = [
        f"{SOURCES[module].relative_to(REPO)}:{line}: {name} from {target}"
        for module in SOURCES
        for target, name, line in imports(module)
        if target.split(".")[0] in (*PACKAGES, "bench") and _private(name) and target != module
    ]
    assert offenders == []


def test_bench_reaches_no_private_attribute() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{found}"
        for path in BENCH.values()
        for found in private_attributes(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_whole_tree_modules_stay_small(module: str) -> None:
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(REPO)} has {lines} lines (> {MAX_LINES}): split it"


def test_every_path_readme_names_exists() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    named = sorted(set(re.findall(r"`((?:proxy|policies)/[A-Za-z0-9_./]*)`", readme)))
    assert named, "README.md names no proxy/ or policies/ path"
    assert [path for path in named if not (REPO / path).exists()] == []
