"""The layers of rltap, read off the source: no import cycle, and the proxy on top.

Every `import` and `from ... import` of an rltap module counts, wherever it stands: at the top,
inside a function, or under `if TYPE_CHECKING:`. A module importing `rltap.a.b` depends on
`rltap.a.b` (its parent packages load first, but they are not its dependencies).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import rltap

SOURCE = Path(rltap.__file__).parent
# The entry points above the proxy, which run it or talk to it.
PROXY_USERS = {
    "rltap",
    "rltap.areal.proxy.client_session",
    "rltap.cli.commands",
    "rltap.rollout.runner",
    "rltap.rollout.serving",
    "rltap.train.loop",
    "rltap.rollout.workflow",
    "rltap.testing.adapter_suite",
    "rltap.testing.harness",
    "rltap.testing.proxy",
    "rltap.view.app",  # rltap's own FastAPI stack: the proxy's error envelope
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The rltap modules `path` imports (`from rltap.x import name` counts `rltap.x.name` when
    that is a module, else `rltap.x`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("rltap"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rltap"):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
    return found & modules


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in SOURCE.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, modules) - {name} for name, path in paths.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph[node]):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_takes_part_in_an_import_cycle() -> None:
    assert _cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_only_the_entry_points_above_the_proxy_import_it_and_through_its_package() -> None:
    users = {
        name: sorted(i for i in imports if i == "rltap.proxy" or i.startswith("rltap.proxy."))
        for name, imports in import_graph().items()
        if not (name == "rltap.proxy" or name.startswith("rltap.proxy."))
    }
    users = {name: imports for name, imports in users.items() if imports}
    assert set(users) <= PROXY_USERS
    assert all(imports == ["rltap.proxy"] for imports in users.values()), users


def test_the_config_package_imports_only_data_modules() -> None:
    """Anything may import the settings (`rltap.config`): they import nothing above the data."""
    imports = {
        name: sorted(i for i in found if not i.startswith(("rltap.config", "rltap.record")))
        for name, found in import_graph().items()
        if name == "rltap.config" or name.startswith("rltap.config.")
    }
    assert imports
    assert not any(imports.values()), imports


@pytest.mark.parametrize(
    "module",
    [
        "rltap.session.session",
        "rltap.session.exchange",
        "rltap.client.direct",
        "rltap.record.generation",
        "rltap.protocols.sse",
        "rltap.protocols",
        "rltap.engines",
        "rltap.chat",
    ],
)
def test_the_layers_below_the_proxy_never_import_it(module: str) -> None:
    graph = import_graph()
    reachable: set[str] = set()
    todo = [name for name in graph if name == module or name.startswith(module + ".")]
    while todo:
        name = todo.pop()
        if name not in reachable:
            reachable.add(name)
            todo.extend(graph[name])
    assert not any(name == "rltap.proxy" or name.startswith("rltap.proxy.") for name in reachable)


def _top_level_imports(path: Path, modules: set[str]) -> set[str]:
    """Every module `path` imports outside its functions (`TYPE_CHECKING` blocks excepted: they
    import nothing at run time), rltap's (`_source`) and others'."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                found.add(child.module)
                if child.module.startswith("rltap"):
                    found.update(_source(child.module, a.name, modules) for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def _loads(graph: dict[str, set[str]], module: str) -> set[str]:
    """The top-level modules (rltap's and others') that importing `module` loads."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        # Importing rltap.a.b runs rltap/__init__ and rltap/a/__init__ first.
        for depth in range(1, len(parts) + 1):
            prefix = ".".join(parts[:depth])
            if prefix not in seen:
                seen.add(prefix)
                todo.extend(graph.get(prefix, ()))
    return seen


def _source(module: str, name: str, modules: set[str]) -> str:
    """The module `from module import name` loads: a submodule, or the module defining the name
    (a package's lazy names come from its modules)."""
    if f"{module}.{name}" in modules:
        return f"{module}.{name}"
    defined = getattr(getattr(importlib.import_module(module), name), "__module__", module)
    return defined if defined in modules else module


def _function_level_imports() -> list[tuple[str, str]]:
    """(importer, rltap module) for each import of an rltap module inside a function."""
    found = []
    modules = set(import_graph())
    for path in SOURCE.rglob("*.py"):
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rltap"):
                    for alias in node.names:
                        source = _source(node.module or "", alias.name, modules)
                        found.append((_module_name(path), source))
    return found


def test_a_function_level_import_of_rltap_defers_an_optional_dependency() -> None:
    """A module imports rltap's modules at its top, unless one brings in an optional dependency
    (`rltap._lazy.OPTIONAL_MODULES`) that the importer itself does not load."""
    from rltap._lazy import OPTIONAL_MODULES

    paths = {_module_name(p): p for p in SOURCE.rglob("*.py")}
    graph = {name: _top_level_imports(path, set(paths)) for name, path in paths.items()}

    def optional(module: str) -> set[str]:
        return {name for name in _loads(graph, module) if name.split(".")[0] in OPTIONAL_MODULES}

    needless = [
        f"{importer} -> {imported}"
        for importer, imported in _function_level_imports()
        if not optional(imported) - optional(importer)
    ]
    assert needless == [], "\n".join(needless)


def test_the_optional_dependency_rule_sees_a_light_module() -> None:
    paths = {_module_name(p): p for p in SOURCE.rglob("*.py")}
    graph = {name: _top_level_imports(path, set(paths)) for name, path in paths.items()}
    assert "torch" in _loads(graph, "rltap.engines.transformers")
    assert "torch" not in _loads(graph, "rltap.record.pack")
