"""The files of a rollout folder (`rltap rollout`'s and each `rltap train` step's), which
`rltap.rollout.runner` describes: written from the rollout's data in memory
(`rltap.rollout.batch`), read back only to resume a folder (`read_rollout`) or to look at it.

A row is written only once all its episodes ended, lines first and its ledger entry last, so a
run cut short leaves lines of unfinished rows only, which `read_rollout` removes.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rltap.record.exported import TOKEN_COLUMNS, ExportedInteraction, token_columns
from rltap.record.pack import TreePack, pack_interactions
from rltap.record.pack_io import save_packs
from rltap.record.types import InteractionWithTokenLogpReward, TokenSequence
from rltap.rollout.batch import EpisodeData, RolloutBatch
from rltap.tree.export import ExportStyle

if TYPE_CHECKING:
    import torch

    from rltap.rollout.workflow import Episode

__all__ = [
    "BATCH",
    "LEDGER",
    "SUMMARY",
    "TRAJECTORIES",
    "RowWriter",
    "episode_data",
    "load_batch",
    "load_rows",
    "load_trajectories",
    "packs_from_lines",
    "read_jsonl",
    "read_rollout",
    "write_batch",
]

TRAJECTORIES = "trajectories.jsonl"
LEDGER = "rows.jsonl"
BATCH = "batch.safetensors"
SUMMARY = "summary.json"


def load_rows(path: Path) -> list[Any]:
    """The dataset: one JSON value per non-empty line."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                msg = f"{path}:{number}: not JSON: {exc}"
                raise ValueError(msg) from None
    return rows


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a file this module appends to; a last line without its newline was cut
    short by an interrupted write and is left out."""
    if not path.exists():
        return []
    complete, _, _cut_short = path.read_bytes().rpartition(b"\n")
    return [orjson.loads(line) for line in complete.splitlines() if line.strip()]


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in records))
    partial.replace(path)


def load_trajectories(out_dir: Path) -> list[dict[str, Any]]:
    """`trajectories.jsonl` of `out_dir`: one dict per exported interaction."""
    return read_jsonl(out_dir / TRAJECTORIES)


def read_rollout(out_dir: Path, style: ExportStyle) -> RolloutBatch:
    """What `out_dir` holds of a rollout run before (nothing in a new folder), as the batch a
    resumed run adds its rows to: the finished rows' lines, ledger entries and, with style tree,
    packs (`packs_from_lines`). Lines of rows that never reached the ledger are removed from the
    file, and a ledger line cut short too, so the next append starts on a line of its own."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if not ((out_dir / LEDGER).exists() or (out_dir / TRAJECTORIES).exists()):
        return RolloutBatch(style=style)
    ledger = read_jsonl(out_dir / LEDGER)
    batch = RolloutBatch(style=style, ledger=ledger)
    _write_jsonl(out_dir / LEDGER, ledger)
    finished = batch.finished
    batch.lines = [line for line in load_trajectories(out_dir) if line["row"] in finished]
    _write_jsonl(out_dir / TRAJECTORIES, batch.lines)
    if style == "tree":
        batch.row_packs = packs_from_lines(batch.lines)
    return batch


def _line(
    row: int, episode: int, session_id: str, node: InteractionWithTokenLogpReward
) -> dict[str, Any]:
    place = {"row": row, "group": row, "episode": episode, "session": session_id}
    exported = ExportedInteraction.of(node).to_json()
    return place | exported | token_columns(node.token_sequence())


def episode_data(row: int, number: int, episode: Episode) -> EpisodeData:
    """Episode `number` of `row` as the rollout hands it on: its trajectory lines, and its pack
    as the workflow decoded it (style tree)."""
    if episode.interactions is None:
        return EpisodeData(episode.session_id, None, error=episode.error)
    lines = [_line(row, number, episode.session_id, n) for n in episode.interactions.values()]
    return EpisodeData(episode.session_id, lines, pack=episode.pack)


class RowWriter:
    """Appends a finished row's lines, then its ledger entry (the order resume relies on)."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir

    def write_row(self, lines: Iterable[dict[str, Any]], entry: dict[str, Any]) -> None:
        with (self.out_dir / TRAJECTORIES).open("ab") as handle:
            handle.write(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        with (self.out_dir / LEDGER).open("ab") as handle:
            handle.write(orjson.dumps(entry) + b"\n")


def write_batch(out_dir: Path, batch: RolloutBatch, pad_token_id: int = 0) -> None:
    """`batch.safetensors` from `batch`: its packs (style tree, `rltap.record.pack_io`'s keys),
    else its lines' tensors right-padded and stacked; nothing for an empty batch."""
    from safetensors.torch import save_file

    if batch.style == "tree":
        if batch.row_packs:
            save_packs(out_dir / BATCH, batch.packs)
        return
    tensors = batch.tensors(pad_token_id)
    if tensors:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out_dir / BATCH))


def packs_from_lines(lines: Iterable[dict[str, Any]]) -> dict[int, TreePack]:
    """Each row's pack again, from its trajectory lines: what a resumed rollout has of the rows
    an earlier run finished (the rows it runs come with the packs the proxy exported)."""
    rows: dict[int, list[dict[str, Any]]] = {}
    for line in lines:
        rows.setdefault(line["row"], []).append(line)
    packs = {}
    for row, mine in rows.items():
        rewards = {line["interaction_id"]: float(line["reward"] or 0.0) for line in mine}
        packs[row] = pack_interactions(_interactions(mine), rewards)
    return packs


def _interactions(lines: list[dict[str, Any]]) -> list[InteractionWithTokenLogpReward]:
    """A row's interactions again, from lines of style individual's (prompt, then output)."""
    built: dict[str, InteractionWithTokenLogpReward] = {}
    for line in lines:
        exported = ExportedInteraction.from_json(line)
        sequence = TokenSequence(**{name: line[name] for name, _ in TOKEN_COLUMNS})
        # A parent another agent's filter left out: the call starts its own branch.
        parent = built.get(exported.parent_id or "")
        built[exported.interaction_id] = exported.rebuild(sequence, parent, own_sequence=True)
    return list(built.values())


def load_batch(out_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(out_dir / BATCH))
