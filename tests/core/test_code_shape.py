"""The library's modules and functions stay small enough to read in one sitting.

A module over 400 lines, or a function over 60, says in its docstring why it must be one piece.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rltap

SOURCE = Path(rltap.__file__).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
REASON = "must be one piece"


def _says_why(node: ast.Module | ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return REASON in " ".join((ast.get_docstring(node) or "").split())


def test_long_modules_say_why_they_are_one_piece() -> None:
    long = []
    for path in sorted(SOURCE.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES and not _says_why(ast.parse(text)):
            long.append(f"{path.relative_to(SOURCE)}: {text.count(chr(10))} lines")
    assert long == []


def test_long_functions_say_why_they_are_one_piece() -> None:
    long = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES and not _says_why(node):
                long.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name}: {lines}")
    assert long == []
