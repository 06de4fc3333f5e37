"""The integration matrix: every framework x {inline, subproc} x {stream, no stream} x wire format,
with two columns: the tool loop and structured output.

A tool-loop cell runs the framework's tool agent through `OpenAIProxyWorkflow` against a real proxy
whose scripted engine makes a real tool call, reads the tool result, then answers. The cell passes
when the agent finished, the export holds the two interactions, parents link them, token fidelity
holds, the reward landed on the right interaction, and the concat export of the tool loop is one
sequence with the loss mask on both generated segments (`rltap.testing.harness.check_episode`).

A structured-output cell runs the framework's own structured-output feature (Agents SDK
`output_type`, LangChain `create_agent(response_format=...)`, CAMEL `step(response_format=...)`,
the SDKs' `parse`) with `rltap.testing.structured.Forecast` against the embedded engine, where the
tiny model samples under the schema's grammar. It passes when the framework parsed the reply into a
`Forecast` (the agent's reward is 1.0), the calls were recorded as constrained, and the episode
checks above hold for its calls.

An integration's matrix test is a subclass:

    class TestLangChainMatrix(AdapterMatrixTests):
        framework = "langchain"
        wire_formats = ("chat", "responses")

        def make_agent(self, *, tools, stream, wire_format): ...   # as in the standard suite
        def make_structured_agent(self, *, stream, wire_format): ...   # reward: forecast_reward

Each cell's result is appended to `$RLTAP_MATRIX_DIR/<framework>.jsonl` (default `.matrix/` in
the working directory); `python -m rltap_dev.matrix [DIR]` prints every cell as one table,
which `make test` does after the nox sessions.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from rltap.config import EpisodeConfig
from rltap.rollout.subproc import AgentPool
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing.harness import EpisodeCheckError, check_episode, embedded_proxy, scripted_proxy
from rltap.testing.proxy import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX
from rltap.testing.structured import FORECAST_QUESTION

__all__ = [
    "MULTI_AGENT",
    "STRUCTURED",
    "TASKS",
    "TOOL_LOOP",
    "AdapterMatrixTests",
    "Cell",
    "CellResult",
    "matrix_dir",
    "print_table",
    "record_result",
    "recorded_cell",
    "run_cell",
    "run_structured_cell",
    "shared_agent_pool",
]

DISCOUNT = 0.9
# One worker process for every subproc cell of a test run: spawning (and importing the framework)
# once instead of per cell.
_SHARED_POOL = AgentPool(1)


TOOL_LOOP = "tool loop"
STRUCTURED = "structured output"
MULTI_AGENT = "multi-agent"
TASKS = (TOOL_LOOP, STRUCTURED, MULTI_AGENT)  # the table's result columns


@dataclass(frozen=True, slots=True)
class Cell:
    framework: str
    mode: str  # inline | subproc
    stream: bool
    wire_format: str  # chat | responses | messages
    task: str = TOOL_LOOP  # one of TASKS

    @property
    def row(self) -> str:
        stream = "stream" if self.stream else "no-stream"
        return f"{self.framework}/{self.mode}/{stream}/{self.wire_format}"

    @property
    def name(self) -> str:
        suffix = {TOOL_LOOP: "", STRUCTURED: "/structured"}.get(self.task, f"/{self.task}")
        return f"{self.row}{suffix}"


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


def record_result(result: CellResult) -> None:
    """Append `result` to its framework's file in `matrix_dir()`."""
    folder = matrix_dir()
    folder.mkdir(parents=True, exist_ok=True)
    line = {**asdict(result.cell), "name": result.cell.name, "row": result.cell.row}
    # Which test checked the cell (pytest names the running one), for `load_results`.
    line["test"] = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    line.update(passed=result.passed, detail=result.detail, seconds=round(result.seconds, 2))
    with (folder / f"{result.cell.framework}.jsonl").open("ab") as handle:
        handle.write(orjson.dumps(line) + b"\n")


@contextlib.contextmanager
def recorded_cell(cell: Cell) -> Iterator[None]:
    """Record the block as `cell`'s result: passed unless it raised (the error is re-raised).

    What a framework without an adapter uses for its rows of the table:

        with recorded_cell(Cell("smolagents", "inline", False, "chat", TOOL_LOOP)):
            ...  # run the episode, assert_one_tree(...), assert_reward_reaches_every_call(...)
    """
    started = time.monotonic()
    try:
        yield
    except BaseException as exc:
        detail = f"{type(exc).__name__}: {exc}"
        record_result(CellResult(cell, False, detail, time.monotonic() - started))
        raise
    record_result(CellResult(cell, True, "ok", time.monotonic() - started))


def final_answer_reward(result: Any, data: Any) -> float:
    """1.0 when the agent's final text is the scripted final answer (tool result included)."""
    return 1.0 if FINAL_PREFIX in str(result) else 0.0


async def run_cell(agent: Any, cell: Cell) -> CellResult:
    """Run one tool-loop episode of `agent` as `cell` says; check it; record the result."""
    question = "What is 2 + 3? Use the tool."
    return await _run_checked(agent, cell, scripted_proxy(), question, calls=2)


async def run_structured_cell(agent: Any, cell: Cell, *, calls: int = 1) -> CellResult:
    """Run one structured-output episode of `agent` on the embedded engine; check it (`calls`
    model calls, each constrained, reward 1.0 from `forecast_reward`); record the result."""
    return await _run_checked(
        agent, cell, embedded_proxy(), FORECAST_QUESTION, calls=calls, constrained=True
    )


async def _run_checked(
    agent: Any,
    cell: Cell,
    proxy_context: contextlib.AbstractAsyncContextManager[RunningProxy],
    question: str,
    *,
    calls: int,
    constrained: bool = False,
) -> CellResult:
    started = time.monotonic()
    try:
        async with proxy_context as proxy:
            episodes = EpisodeConfig(
                mode=cell.mode,  # type: ignore[arg-type]
                discount=DISCOUNT,
                episode_timeout=120,
            )
            workflow = OpenAIProxyWorkflow(
                agent,
                proxy_addr=proxy.url,
                admin_key=proxy.admin_key,
                settings=WorkflowSettings(episodes=episodes),
                agent_pool=_SHARED_POOL,
            )
            try:
                episode = await workflow.run_episode({"question": question})
            finally:
                await workflow.aclose()
        if episode.interactions is None:
            result = CellResult(cell, False, f"agent failed: {episode.error}", 0.0)
        else:
            check_episode(
                episode.interactions,
                expected_interactions=calls,
                expected_reward=1.0,
                discount=DISCOUNT,
            )
            free = [i for i, node in episode.interactions.items() if not node.constrained]
            if constrained and free:
                raise EpisodeCheckError(f"not recorded as constrained: {', '.join(free)}")
            result = CellResult(cell, True, "ok", 0.0)
    except AssertionError as exc:
        result = CellResult(cell, False, str(exc), 0.0)
    result.seconds = time.monotonic() - started
    record_result(result)
    return result


class AdapterMatrixTests:
    """Subclass with `framework`, capability flags, `make_agent` and `make_structured_agent`;
    one test per cell.

    The agent from `make_agent(tools=True, ...)` must return (or have a reward_fn return) a
    reward of 1.0 when its final text contains `rltap.testing.scripts.FINAL_PREFIX`; use
    `final_answer_reward` as its reward_fn. The agent from `make_structured_agent(...)` asks for
    `rltap.testing.structured.Forecast` with the framework's structured-output feature and
    returns what the framework parsed; use `forecast_reward` as its reward_fn. `structured_calls`
    is how many model calls that takes.
    """

    framework: ClassVar[str] = ""
    supports_streaming: ClassVar[bool] = True
    wire_formats: ClassVar[tuple[str, ...]] = ("chat",)
    modes: ClassVar[tuple[str, ...]] = ("inline", "subproc")
    structured_calls: ClassVar[int] = 1

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> Any:
        msg = f"{type(self).__name__} must implement make_agent(tools=, stream=, wire_format=)"
        raise NotImplementedError(msg)

    def make_structured_agent(self, *, stream: bool, wire_format: str) -> Any:
        msg = f"{type(self).__name__} must implement make_structured_agent(stream=, wire_format=)"
        raise NotImplementedError(msg)

    @classmethod
    def cells(cls, task: str = TOOL_LOOP) -> list[Cell]:
        streams = (False, True) if cls.supports_streaming else (False,)
        return [
            Cell(cls.framework, mode, stream, wire_format, task)
            for mode in cls.modes
            for stream in streams
            for wire_format in cls.wire_formats
        ]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        for argument, task in (("cell", TOOL_LOOP), ("structured_cell", STRUCTURED)):
            if argument in metafunc.fixturenames:
                cells = self.cells(task)
                metafunc.parametrize(argument, cells, ids=[c.name for c in cells])

    async def test_cell(self, cell: Cell) -> None:
        agent = self.make_agent(tools=True, stream=cell.stream, wire_format=cell.wire_format)
        result = await run_cell(agent, cell)
        assert result.passed, f"{cell.name}: {result.detail}"

    async def test_structured_cell(self, structured_cell: Cell) -> None:
        cell = structured_cell
        agent = self.make_structured_agent(stream=cell.stream, wire_format=cell.wire_format)
        result = await run_structured_cell(agent, cell, calls=self.structured_calls)
        assert result.passed, f"{cell.name}: {result.detail}"


def load_results(folder: Path) -> list[dict[str, Any]]:
    """One result per cell recorded in `folder`. Each test's latest result of a cell counts (a
    rerun replaces a failed try); a cell that several tests check fails if one of them does."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            if line.strip():
                entry = orjson.loads(line)
                latest[entry["name"], entry.get("test", "")] = entry
    cells: dict[str, dict[str, Any]] = {}
    for (name, _), entry in latest.items():
        if cells.get(name, {}).get("passed", True):
            cells[name] = entry
    return list(cells.values())


def print_table(folder: Path) -> int:
    """Print the matrix, one row per framework/mode/stream/wire format and one result column per
    task ("-": not run); returns 1 if a cell failed or none was recorded."""
    from rich.console import Console
    from rich.table import Table

    results = load_results(folder)
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in results:
        rows.setdefault(entry.get("row", entry["name"]), {})[entry.get("task", TOOL_LOOP)] = entry
    table = Table(title=f"integration matrix ({len(results)} cells)")
    for column in ("framework", "mode", "stream", "wire format", *TASKS, "seconds", "detail"):
        table.add_column(column)
    for _, by_task in sorted(rows.items()):
        first = next(iter(by_task.values()))
        table.add_row(
            first["framework"],
            first["mode"],
            "stream" if first["stream"] else "no stream",
            first["wire_format"],
            *(_verdict(by_task.get(task)) for task in TASKS),
            f"{sum(entry['seconds'] for entry in by_task.values()):.1f}",
            " | ".join(e["detail"][:120] for e in by_task.values() if not e["passed"]),
        )
    Console(width=180).print(table)
    failed = sum(not entry["passed"] for entry in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed or not results else 0


def _verdict(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "-"
    return "[green]pass" if entry["passed"] else "[red]FAIL"


if __name__ == "__main__":
    sys.exit(print_table(Path(sys.argv[1]) if len(sys.argv) > 1 else matrix_dir()))
