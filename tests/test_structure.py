"""The shape of the product code, read from its source (AST, nothing imported):

- no import cycle among the modules of `proxy/` and `policies/`, imports under
  `if TYPE_CHECKING:` included (a cycle closed only for the type checker is still a cycle in the
  design);
- the pure core of `policies/` never imports its memo (`policies.memo`), nor anything of the proxy;
- the serving edge (`proxy/serving/`) sits on top: only the `ctxproxy` command imports it;
- no module of the product or of `bench/` imports a `_private` name from another module, and
  `bench/` reaches no `_private` attribute of another object either (it measures the product
  through its public entry points); no module of `proxy/` or `policies/` is longer than 500 lines
  (STYLE: "rarely over 500");
- the client APIs are known in one place (`proxy/protocols/`, issue 31): no module of the proxy
  outside it names a wire -- no string equal to a wire's name, no identifier containing one, no
  import of a wire's own package or of a wire object by name -- so routing, auth, recall, the
  inspector and the ledger ask the `Wire` instead of branching on which one it is, and adding an
  API is its package plus one line in the registry;
- every repository path README.md and `docs/*.md` name in backquotes exists, and every relative
  link between them reaches a file and, with a `#fragment`, a heading of it (the walk-through in
  docs/request-flow.md is how a newcomer finds the code).
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
            if any(part.startswith(".") for part in parts):
                continue  # a hidden directory is an install, not the project's (bench/.venv-litellm)
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


def test_only_the_command_imports_the_serving_edge() -> None:
    offenders = [
        f"{module} imports {target}"
        for module in MODULES
        if not module.startswith("proxy.serving") and module != "proxy.cli"
        for target, _, _ in imports(module)
        if target.startswith("proxy.serving")
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


PROTOCOLS = REPO / "proxy" / "protocols"
WIRE_PACKAGES = frozenset(p.name for p in PROTOCOLS.iterdir() if (p / "__init__.py").exists())
"""The wires' own packages (`proxy/protocols/<wire>/`)."""
KNOWN_ELSEWHERE: dict[str, str] = {}
"""Modules outside `proxy/protocols/` allowed to name a wire, each with the reason why: none."""


def wire_names() -> frozenset[str]:
    """The `name` every wire class declares (`name = "..."` in a class of a wire package)."""
    names = set()
    for path in PROTOCOLS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for statement in node.body:
                    if (
                        isinstance(statement, (ast.Assign, ast.AnnAssign))
                        and any(isinstance(t, ast.Name) and t.id == "name" for t in _targets(statement))
                        and isinstance(statement.value, ast.Constant)
                        and isinstance(statement.value.value, str)
                    ):
                        names.add(statement.value.value)
    return frozenset(names)


def _targets(statement: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return statement.targets if isinstance(statement, ast.Assign) else [statement.target]


def wire_objects() -> frozenset[str]:
    """The names the registry (`proxy/protocols/__init__.py`) binds to a wire package's exports."""
    tree = ast.parse((PROTOCOLS / "__init__.py").read_text(encoding="utf-8"))
    return frozenset(
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1 and (node.module or "") in WIRE_PACKAGES
        for alias in node.names
    )


def naming_a_wire(module: str, names: frozenset[str], objects: frozenset[str]) -> list[str]:
    """`line: what` wherever `module` names a wire."""
    found: list[str] = []
    for node in ast.walk(ast.parse(SOURCES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and node.value in names:
            found.append(f"{node.lineno}: the string {node.value!r}")
        identifier = {
            ast.Name: lambda n: n.id,
            ast.Attribute: lambda n: n.attr,
            ast.FunctionDef: lambda n: n.name,
            ast.AsyncFunctionDef: lambda n: n.name,
            ast.ClassDef: lambda n: n.name,
            ast.arg: lambda n: n.arg,
            ast.alias: lambda n: n.asname or n.name.rsplit(".", 1)[-1],
        }.get(type(node))
        text = identifier(node) if identifier is not None else None
        if text and any(name in text.lower() for name in names):
            found.append(f"{getattr(node, 'lineno', 0)}: the identifier {text}")
    for target, name, line in imports(module):
        parts = target.split(".")
        if parts[:2] == ["proxy", "protocols"] and len(parts) > 2 and parts[2] in WIRE_PACKAGES:
            found.append(f"{line}: an import of {target}")
        elif target == "proxy.protocols" and name in objects:
            found.append(f"{line}: an import of {name} from proxy.protocols")
    return sorted(set(found), key=lambda f: int(f.split(":")[0]))


def test_the_wire_name_finder_finds_them() -> None:
    names, objects = wire_names(), wire_objects()
    assert {"openai_chat", "anthropic", "openai_responses"} <= names
    assert {"OPENAI_CHAT", "ANTHROPIC"} <= objects
    assert naming_a_wire("proxy.protocols.anthropic.wire", names, objects)  # the wire itself does
    assert naming_a_wire("proxy.protocols", names, objects)  # the registry imports the wires


def test_no_module_outside_the_protocols_names_a_wire() -> None:
    names, objects = wire_names(), wire_objects()
    offenders = {
        str(MODULES[module].relative_to(REPO)): found
        for module in MODULES
        if module.startswith("proxy.")  # `policies/` counts tokens by the provider's rendering (tokens.py)
        and not module.startswith("proxy.protocols")
        and (found := naming_a_wire(module, names, objects))
        and str(MODULES[module].relative_to(REPO)) not in KNOWN_ELSEWHERE
    }
    assert offenders == {}, "ask the Wire (proxy/protocols/base.py) instead of naming one"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_whole_tree_modules_stay_small(module: str) -> None:
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(REPO)} has {lines} lines (> {MAX_LINES}): split it"


DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOP_DIRS = ("proxy", "policies", "tests", "bench", "deploy", "docs", ".ci")
NOT_IN_CHECKOUT = {"tests/agents/node_modules"}  # installed by `npm ci --prefix tests/agents`


def named_paths(text: str) -> set[str]:
    """The repository paths a page names in backquotes: anything under a top-level directory of the
    repository (`proxy/relay.py`, `tests/e2e/`), and top-level files (`config.example.yaml`)."""
    found = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        if " " in span:
            continue
        if "/" in span and span.split("/")[0] in TOP_DIRS:
            found.add(span)
        elif re.fullmatch(r"[A-Za-z0-9_.-]+\.(?:md|yaml|yml|toml)|Dockerfile", span):
            found.add(span)
    return found - NOT_IN_CHECKOUT


def _exists(path: str) -> bool:
    return any(REPO.glob(path)) if "*" in path else (REPO / path).exists()


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def test_anchor_matches_github() -> None:
    assert anchor("The inspector (/ui/)") == "the-inspector-ui"
    assert anchor("Last resort: pruning") == "last-resort-pruning"


def test_the_docs_name_repository_paths() -> None:
    named = set().union(*(named_paths(page.read_text(encoding="utf-8")) for page in DOCS))
    assert any(path.startswith(("proxy/", "policies/")) for path in named), "the docs name no proxy/ or policies/ path"
    assert named_paths("`proxy/relay.py`, `config.example.yaml`, `redis/lua/`, `~/.codex/config.toml`") == {
        "proxy/relay.py",
        "config.example.yaml",
    }


@pytest.mark.parametrize("page", DOCS, ids=lambda page: str(page.relative_to(REPO)))
def test_every_path_the_docs_name_exists(page: Path) -> None:
    named = named_paths(page.read_text(encoding="utf-8"))
    assert sorted(path for path in named if not _exists(path)) == []


@pytest.mark.parametrize("page", DOCS, ids=lambda page: str(page.relative_to(REPO)))
def test_every_link_in_the_docs_resolves(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_relative_to(REPO) or not file.exists():
            broken.append(target)
        elif fragment and (file.suffix != ".md" or fragment not in anchors(file)):
            broken.append(target)
    assert broken == []


def test_operations_lists_every_metric() -> None:
    from proxy.metrics import Metrics

    rendered = re.findall(r"^# HELP (\S+) ", Metrics().render().decode(), flags=re.M)
    assert len(rendered) > 10
    documented = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    assert [name for name in rendered if f"`{name}" not in documented] == []
