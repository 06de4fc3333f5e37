"""Running a Markdown file's code blocks as written: what the tests of README.md and docs/ use.

A block is taken verbatim; the only edits allowed are `substitute`'s explicit placeholder
mapping (a model folder, a port), and a placeholder that no longer occurs fails loudly, so the
mapping cannot go stale. Python blocks may use top-level `await`.

Usage:
    blocks = code_blocks(Path("README.md"))
    (block,) = find_blocks(blocks, "python", containing="rltap_langchain")
    source = substitute(block.text, {"http://127.0.0.1:8000": proxy.url})
    namespace = await run_python(source, name="readme_langchain")

    episode = await run_quickstart(Path("README.md"), "rltap_langchain", proxy)  # the same
"""

from __future__ import annotations

import ast
import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rltap.testing.proxy import RunningProxy

__all__ = [
    "README_PROXY",
    "CodeBlock",
    "code_blocks",
    "find_blocks",
    "run_python",
    "run_quickstart",
    "substitute",
]

README_PROXY = "http://127.0.0.1:8000"  # where the README's blocks reach the proxy

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """One fenced block: its language (the info string's first word), text, where it starts
    (1-based line of its first code line) and the nearest heading above it."""

    language: str
    text: str
    line: int
    heading: str

    @property
    def label(self) -> str:
        """`python@42` style: a short id for test parameters and messages."""
        return f"{self.language or 'plain'}@{self.line}"


def code_blocks(path: str | Path) -> list[CodeBlock]:
    """Every fenced code block of the Markdown file at `path`, in order."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    blocks: list[CodeBlock] = []
    heading = ""
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            title = _HEADING.match(lines[index])
            if title is not None:
                heading = title.group("title")
            index += 1
            continue
        fence = opening.group("fence")
        info = opening.group("info").strip()
        body: list[str] = []
        index += 1
        start = index + 1
        while index < len(lines) and not _closes(lines[index], fence):
            body.append(lines[index])
            index += 1
        if index == len(lines):
            msg = f"{path}:{start - 1}: code block never closed"
            raise ValueError(msg)
        language = info.split()[0] if info else ""
        blocks.append(CodeBlock(language, "\n".join(body) + "\n", start, heading))
        index += 1
    return blocks


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}


def find_blocks(
    blocks: list[CodeBlock], language: str, *, containing: str | None = None
) -> list[CodeBlock]:
    """The blocks in `language` whose text contains `containing` (all of them when None)."""
    return [
        block
        for block in blocks
        if block.language == language and (containing is None or containing in block.text)
    ]


def substitute(text: str, mapping: dict[str, str]) -> str:
    """`text` with each key of `mapping` replaced; a key that does not occur raises ValueError."""
    for placeholder, value in mapping.items():
        if placeholder not in text:
            msg = f"placeholder {placeholder!r} does not occur in the block"
            raise ValueError(msg)
        text = text.replace(placeholder, value)
    return text


async def run_python(source: str, *, name: str) -> dict[str, Any]:
    """Execute `source` as the body of a fresh module `name` (top-level `await` allowed) and
    return its namespace.

    The module is registered in `sys.modules`, so what the code defines resolves and pickles as
    it would from a file (libraries read `__module__` to find type hints).
    """
    module = types.ModuleType(name)
    sys.modules[name] = module
    code = compile(source, f"<{name}>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, module.__dict__)  # the README's own code, by design
    if result is not None:  # a coroutine: the block awaits something at top level
        await result
    return module.__dict__


async def run_quickstart(readme: str | Path, adapter_module: str, proxy: RunningProxy) -> Any:
    """Run the one Python block of `readme` that imports from `adapter_module` against `proxy`
    and return the `episode` it leaves.

    The block reaches the proxy at README_PROXY and reads the admin key from RLTAP_ADMIN_KEY;
    both are pointed at `proxy` while it runs.
    """
    blocks = find_blocks(code_blocks(readme), "python", containing=f"from {adapter_module} import")
    if len(blocks) != 1:
        msg = f"{readme}: {len(blocks)} Python blocks import from {adapter_module}, expected one"
        raise ValueError(msg)
    source = substitute(blocks[0].text, {README_PROXY: proxy.url})
    previous = os.environ.get("RLTAP_ADMIN_KEY")
    os.environ["RLTAP_ADMIN_KEY"] = proxy.admin_key
    try:
        namespace = await run_python(source, name=f"readme_quickstart_{adapter_module}")
    finally:
        if previous is None:
            del os.environ["RLTAP_ADMIN_KEY"]
        else:
            os.environ["RLTAP_ADMIN_KEY"] = previous
    return namespace["episode"]
