"""The integration matrix: every framework x {inline, subproc} x {stream, no stream} x wire format.

Each cell runs the framework's tool agent through `OpenAIProxyWorkflow` against a real proxy whose
scripted engine makes a real tool call, reads the tool result, then answers. The cell passes when
the agent finished, the export holds the two interactions, parents link them, token fidelity holds,
the reward landed on the right interaction, and the concat export of the tool loop is one sequence
with the loss mask on both generated segments (`rltap.testing.harness.check_episode`).

An integration's matrix test is a subclass:

    class TestLangChainMatrix(AdapterMatrixTests):
        framework = "langchain"
        wire_formats = ("chat", "responses")

        def make_agent(self, *, tools, stream, wire_format): ...   # as in the standard suite

Each cell's result is appended to `$RLTAP_MATRIX_DIR/<framework>.jsonl` (default `.matrix/` in
the working directory); `python -m rltap.testing.matrix [DIR]` prints every cell as one table,
which `make test` does after the nox sessions.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from rltap.subproc import AgentPool
from rltap.testing.harness import check_episode, scripted_proxy
from rltap.testing.scripts import FINAL_PREFIX
from rltap.workflow import OpenAIProxyWorkflow

__all__ = [
    "AdapterMatrixTests",
    "Cell",
    "CellResult",
    "matrix_dir",
    "print_table",
    "run_cell",
    "shared_agent_pool",
]

DISCOUNT = 0.9
# One worker process for every subproc cell of a test run: spawning (and importing the framework)
# once instead of per cell.
_SHARED_POOL = AgentPool(1)


@dataclass(frozen=True, slots=True)
class Cell:
    framework: str
    mode: str  # inline | subproc
    stream: bool
    wire_format: str  # chat | responses | messages

    @property
    def name(self) -> str:
        stream = "stream" if self.stream else "no-stream"
        return f"{self.framework}/{self.mode}/{stream}/{self.wire_format}"


@dataclass(slots=True)
class CellResult:
    cell: Cell
    passed: bool
    detail: str
    seconds: float


def shared_agent_pool() -> AgentPool:
    """The one subprocess worker pool of this test process (spawned on first use)."""
    return _SHARED_POOL


def matrix_dir() -> Path:
    return Path(os.environ.get("RLTAP_MATRIX_DIR", ".matrix"))


def _record(result: CellResult) -> None:
    folder = matrix_dir()
    folder.mkdir(parents=True, exist_ok=True)
    line = {**asdict(result.cell), "name": result.cell.name}
    line.update(passed=result.passed, detail=result.detail, seconds=round(result.seconds, 2))
    with (folder / f"{result.cell.framework}.jsonl").open("ab") as handle:
        handle.write(orjson.dumps(line) + b"\n")


def final_answer_reward(result: Any, data: Any) -> float:
    """1.0 when the agent's final text is the scripted final answer (tool result included)."""
    return 1.0 if FINAL_PREFIX in str(result) else 0.0


async def run_cell(agent: Any, cell: Cell) -> CellResult:
    """Run one tool-loop episode of `agent` as `cell` says; check it; record the result."""
    started = time.monotonic()
    try:
        async with scripted_proxy() as proxy:
            workflow = OpenAIProxyWorkflow(
                agent,
                proxy_addr=proxy.url,
                admin_key=proxy.admin_key,
                mode=cell.mode,  # type: ignore[arg-type]
                discount=DISCOUNT,
                agent_pool=_SHARED_POOL,
                episode_timeout=120,
            )
            try:
                episode = await workflow.run_episode({"question": "What is 2 + 3? Use the tool."})
            finally:
                await workflow.aclose()
        if episode.interactions is None:
            result = CellResult(cell, False, f"agent failed: {episode.error}", 0.0)
        else:
            check_episode(
                episode.interactions,
                expected_interactions=2,
                expected_reward=1.0,
                discount=DISCOUNT,
            )
            result = CellResult(cell, True, "ok", 0.0)
    except AssertionError as exc:
        result = CellResult(cell, False, str(exc), 0.0)
    result.seconds = time.monotonic() - started
    _record(result)
    return result


class AdapterMatrixTests:
    """Subclass with `framework`, capability flags and `make_agent`; one test per cell.

    The agent from `make_agent(tools=True, ...)` must return (or have a reward_fn return) a
    reward of 1.0 when its final text contains `rltap.testing.scripts.FINAL_PREFIX`; use
    `final_answer_reward` as its reward_fn.
    """

    framework: ClassVar[str] = ""
    supports_streaming: ClassVar[bool] = True
    wire_formats: ClassVar[tuple[str, ...]] = ("chat",)
    modes: ClassVar[tuple[str, ...]] = ("inline", "subproc")

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> Any:
        msg = f"{type(self).__name__} must implement make_agent(tools=, stream=, wire_format=)"
        raise NotImplementedError(msg)

    @classmethod
    def cells(cls) -> list[Cell]:
        streams = (False, True) if cls.supports_streaming else (False,)
        return [
            Cell(cls.framework, mode, stream, wire_format)
            for mode in cls.modes
            for stream in streams
            for wire_format in cls.wire_formats
        ]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "cell" in metafunc.fixturenames:
            cells = self.cells()
            metafunc.parametrize("cell", cells, ids=[c.name for c in cells])

    async def test_cell(self, cell: Cell) -> None:
        agent = self.make_agent(tools=True, stream=cell.stream, wire_format=cell.wire_format)
        result = await run_cell(agent, cell)
        assert result.passed, f"{cell.name}: {result.detail}"


def load_results(folder: Path) -> list[dict[str, Any]]:
    """The latest result of every cell recorded in `folder`."""
    latest: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            if line.strip():
                entry = orjson.loads(line)
                latest[entry["name"]] = entry
    return list(latest.values())


def print_table(folder: Path) -> int:
    """Print the matrix; returns 1 if a cell failed or none was recorded."""
    from rich.console import Console
    from rich.table import Table

    results = load_results(folder)
    table = Table(title=f"integration matrix ({len(results)} cells)")
    for column in ("framework", "mode", "stream", "wire format", "result", "seconds", "detail"):
        table.add_column(column)
    for entry in sorted(results, key=lambda e: e["name"]):
        table.add_row(
            entry["framework"],
            entry["mode"],
            "stream" if entry["stream"] else "no stream",
            entry["wire_format"],
            "[green]pass" if entry["passed"] else "[red]FAIL",
            f"{entry['seconds']:.1f}",
            "" if entry["passed"] else entry["detail"][:120],
        )
    Console(width=160).print(table)
    failed = sum(not entry["passed"] for entry in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(print_table(Path(sys.argv[1]) if len(sys.argv) > 1 else matrix_dir()))
