"""The integration matrix's table: one row per framework/mode/stream/wire format, one result
column per task (tool loop, structured output, multi-agent), and a failing exit status when a
cell failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from rltap_dev.matrix import (
    MULTI_AGENT,
    STRUCTURED,
    TOOL_LOOP,
    Cell,
    CellResult,
    print_table,
    record_result,
)


def record(cell: Cell, passed: bool, detail: str = "ok") -> None:
    record_result(CellResult(cell, passed, detail, 1.5))


def test_each_row_shows_every_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RLTAP_MATRIX_DIR", str(tmp_path))
    record(Cell("fw", "inline", False, "chat"), True)
    record(Cell("fw", "inline", False, "chat", STRUCTURED), False, "no Forecast parsed")
    record(Cell("fw", "subproc", True, "responses"), True)

    assert print_table(tmp_path) == 1

    out = capsys.readouterr().out
    assert "tool loop" in out
    assert "structured output" in out
    rows = [line for line in out.splitlines() if "fw" in line]
    assert len(rows) == 2
    inline, subproc = rows
    assert inline.split("│")[5:9] == [
        " pass      ",
        " FAIL              ",
        " -           ",
        " 3.0     ",
    ]
    assert "no Forecast parsed" in inline
    assert subproc.split("│")[5:7] == [" pass      ", " -                 "]
    assert "2 passed, 1 failed" in out


def test_the_latest_result_of_a_cell_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLTAP_MATRIX_DIR", str(tmp_path))
    cell = Cell("fw", "inline", True, "messages", STRUCTURED)
    record(cell, False, "first try")
    record(cell, True)
    assert print_table(tmp_path) == 0


def test_a_cell_fails_when_one_of_the_tests_that_check_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLTAP_MATRIX_DIR", str(tmp_path))
    cell = Cell("fw", "inline", False, "chat", MULTI_AGENT)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_a.py::test_round_robin (call)")
    record(cell, False, "two trees")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_a.py::test_swarm (call)")
    record(cell, True)
    assert print_table(tmp_path) == 1


def test_cell_names() -> None:
    assert Cell("camel", "subproc", True, "chat").name == "camel/subproc/stream/chat"
    structured = Cell("camel", "subproc", False, "chat", STRUCTURED)
    assert structured.name == "camel/subproc/no-stream/chat/structured"
    assert structured.row == Cell("camel", "subproc", False, "chat", TOOL_LOOP).row
    team = Cell("agno", "inline", False, "chat", MULTI_AGENT)
    assert team.name == "agno/inline/no-stream/chat/multi-agent"
