"""The library raises, it never exits the process: only `rltap.cli` turns an error into an exit
status. An AST scan of the package finds no `SystemExit` (raised, caught or named) and no
`sys.exit()` outside `cli/`, but in a script's own `if __name__ == "__main__":` block."""

from __future__ import annotations

import ast
from pathlib import Path

import rltap

SOURCE = Path(rltap.__file__).parent
EXITING = "cli"  # the one package that may end the process


def _is_main_guard(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and any(
            isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators
        )
    )


def _exits(node: ast.AST) -> bool:
    if isinstance(node, ast.Name | ast.Attribute):
        return (node.id if isinstance(node, ast.Name) else node.attr) == "SystemExit"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        func = node.func
        return func.attr == "exit" and isinstance(func.value, ast.Name) and func.value.id == "sys"
    return False


def _exits_in(tree: ast.Module) -> list[int]:
    """Lines that exit, outside the module's `if __name__ == "__main__":` blocks."""
    lines = []
    pending: list[ast.AST] = [node for node in tree.body if not _is_main_guard(node)]
    while pending:
        node = pending.pop()
        if _exits(node):
            lines.append(node.lineno)  # type: ignore[attr-defined]
        pending.extend(ast.iter_child_nodes(node))
    return sorted(lines)


def test_the_scan_finds_an_exit_and_spares_a_scripts_main_block() -> None:
    library = ast.parse(
        "def f():\n    raise SystemExit(1)\n"
        "def g():\n    try:\n        pass\n    except builtins.SystemExit:\n        pass\n"
        "def h():\n    sys.exit(2)\n"
    )
    assert _exits_in(library) == [2, 6, 9]
    script = ast.parse("if __name__ == '__main__':\n    sys.exit(main())\n")
    assert _exits_in(script) == []


def test_no_module_outside_cli_exits_the_process() -> None:
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE)
        if relative.parts[0] == EXITING:
            continue
        found += [f"{relative}:{line}" for line in _exits_in(ast.parse(path.read_text()))]
    assert found == []
