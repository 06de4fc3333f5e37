"""`rltap export` and `rltap inspect` on the store a killed proxy left: Parquet that Hugging Face
datasets loads as it is, JSONL with the same rows, safetensors batches and packs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from capture_run import Recorded

from rltap.cli.commands import main


def _export(recorded: Recorded, out: Path, *flags: str) -> Path:
    assert main(["export", str(recorded.store.parent), "--out", str(out), *flags]) == 0
    return out


@pytest.fixture(scope="module")
def parquet_rows(
    recorded: Recorded, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    import datasets

    folder = tmp_path_factory.mktemp("parquet")
    path = _export(recorded, folder / "all.parquet", "--discount", "0.9")
    loaded = datasets.load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(folder / "hf")
    )
    return list(loaded)


def test_parquet_loads_in_datasets_one_row_per_interaction(
    recorded: Recorded, parquet_rows: list[dict[str, Any]]
) -> None:
    replies = {name: session.replies for name, session in recorded.sessions.items()}
    by_session = {session.session_id: name for name, session in recorded.sessions.items()}
    rows = {
        name: [r for r in parquet_rows if by_session[r["session_id"]] == name] for name in replies
    }
    assert [r["interaction_id"] for r in rows["ended"]] == replies["ended"]
    assert [r["interaction_id"] for r in rows["open"]] == replies["open"]
    assert len(rows["siblings"]) == 3  # the n=2 pair and the follow-up
    assert {r["session_state"] for r in rows["open"]} == {"interrupted"}
    assert {r["session_state"] for r in rows["ended"]} == {"ended"}
    assert [r["reward"] for r in rows["ended"]] == pytest.approx([0.81, 0.9, 1.0])
    for name, session in recorded.sessions.items():
        for row in rows[name]:
            if row["interaction_id"] not in session.logprobs:
                continue  # the second of the pair: its reply was not the one read
            mask = np.array(row["loss_mask"]) == 1
            generated = np.array(row["logprobs"], dtype=np.float32)[mask]
            np.testing.assert_allclose(
                generated, np.float32(session.logprobs[row["interaction_id"]])
            )
            assert len(row["input_ids"]) == len(row["versions"]) == len(row["loss_mask"])
            assert all(isinstance(token, int) for token in row["input_ids"])


def test_jsonl_holds_the_same_rows_as_parquet(
    recorded: Recorded, parquet_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    path = _export(recorded, tmp_path / "all.jsonl", "--format", "jsonl", "--discount", "0.9")
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [line["interaction_id"] for line in lines] == [r["interaction_id"] for r in parquet_rows]
    for line, row in zip(lines, parquet_rows, strict=True):
        assert line["input_ids"] == row["input_ids"]
        assert line["messages"] == row["messages"]
        np.testing.assert_allclose(np.float32(line["logprobs"]), row["logprobs"])


def test_concat_and_tree_styles_export_branches_and_packs(
    recorded: Recorded, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    concat = pq.read_table(
        _export(recorded, tmp_path / "c.parquet", "--style", "concat")
    ).to_pylist()
    ended = recorded.sessions["ended"]
    [chain] = [row for row in concat if row["session_id"] == ended.session_id]
    assert chain["interaction_id"] == ended.replies[-1]  # the leaf holds the whole branch
    segments = np.flatnonzero(np.diff(np.array([0, *chain["loss_mask"]])) == 1)
    assert len(segments) == 3  # every call's output, one loss segment each
    tree = pq.read_table(_export(recorded, tmp_path / "t.parquet", "--style", "tree")).to_pylist()
    assert len(tree) == 3  # one pack per session
    [pack] = [row for row in tree if row["session_id"] == ended.session_id]
    assert pack["interaction_ids"] == ended.replies
    assert [leaf["interaction_id"] for leaf in pack["leaves"]] == [ended.replies[-1]]


def test_safetensors_batches_and_packs(recorded: Recorded, tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    from rltap.record.pack_io import load_packs

    batch = load_file(str(_export(recorded, tmp_path / "b.safetensors", "--format", "safetensors")))
    assert batch["input_ids"].shape[0] == 8
    assert batch["rewards"].shape == (8,)
    assert batch["input_ids"].dtype == np.int32
    assert batch["logprobs"].dtype == np.float32
    path = _export(
        recorded, tmp_path / "p.safetensors", "--format", "safetensors", "--style", "tree"
    )
    assert len(load_packs(path)) == 3


def test_inspect_prints_sessions_by_state(
    recorded: Recorded, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich's width: no cell cut short
    assert main(["inspect", str(recorded.store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    cells = {
        line.split("│")[1].strip(): line.split("│")[2:] for line in lines if line.count("│") > 5
    }
    assert int(cells["ended"][0]) == 2  # sessions "ended" and "siblings"
    assert int(cells["interrupted"][0]) == 1
    assert int(cells["all"][2]) == 8  # calls ok
    assert int(cells["all"][3]) == 1  # the refused one


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What `rltap ARGV` said on stderr, refused with exit status 2 as a usage error is."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_export_of_a_folder_without_a_store_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said = refused(["export", str(tmp_path), "--out", str(tmp_path / "x.parquet")], capsys)
    assert said.startswith(f"rltap export: {tmp_path}")
    assert "holds no capture store" in said


def test_export_refuses_a_discount_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["export", str(tmp_path), "--out", str(tmp_path / "x.parquet"), "--discount", "1.5"]
    assert refused(argv, capsys) == "rltap export: --discount must be in [0, 1], got 1.5\n"


@pytest.mark.parametrize("command", ["inspect", "export"])
def test_a_file_that_is_no_capture_store_is_named_and_left_as_it_was(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all\n")
    out = ["--out", str(tmp_path / "x.jsonl")] if command == "export" else []
    for path in (other, text):
        before = path.read_bytes()
        said = refused([command, str(path), *out], capsys)
        assert said.startswith(f"rltap {command}: {path}")
        assert "is not an rltap capture store" in said
        assert path.read_bytes() == before
