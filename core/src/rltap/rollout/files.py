"""The files of a rollout folder (`rltap rollout`'s and each `rltap train` step's), which
`rltap.rollout.runner` describes: writing a finished row, reading the lines back, resuming.

A row is written only once all its episodes ended, lines first and its ledger entry last, so a
run cut short leaves lines of unfinished rows only, which `drop_unfinished` removes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rltap.record.exported import TOKEN_COLUMNS, ExportedInteraction, token_columns
from rltap.record.pack import pack_interactions
from rltap.record.pack_io import save_packs
from rltap.record.types import InteractionWithTokenLogpReward, TokenSequence
from rltap.tree.export import ExportStyle, padded_batch

if TYPE_CHECKING:
    import torch

    from rltap.rollout.workflow import Episode

__all__ = [
    "BATCH",
    "LEDGER",
    "SUMMARY",
    "TRAJECTORIES",
    "EpisodeLines",
    "RowWriter",
    "drop_unfinished",
    "episode_lines",
    "finished_rows",
    "load_batch",
    "load_rows",
    "load_trajectories",
    "read_jsonl",
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
    return read_jsonl(out_dir / TRAJECTORIES)


def finished_rows(out_dir: Path) -> set[int]:
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = read_jsonl(out_dir / LEDGER)
    _write_jsonl(out_dir / LEDGER, entries)  # without a cut-short line the next append would join
    return {entry["row"] for entry in entries}


def drop_unfinished(out_dir: Path, finished: set[int]) -> None:
    lines = [line for line in load_trajectories(out_dir) if line["row"] in finished]
    _write_jsonl(out_dir / TRAJECTORIES, lines)


def _line(
    row: int, episode: int, session_id: str, node: InteractionWithTokenLogpReward
) -> dict[str, Any]:
    place = {"row": row, "group": row, "episode": episode, "session": session_id}
    exported = ExportedInteraction.of(node).to_json()
    return place | exported | token_columns(node.token_sequence())


@dataclass(slots=True)
class EpisodeLines:
    """One episode as the files hold it: its trajectory lines, or why it failed (`lines` None);
    `retries` counts the times it was run again after the worker running it died."""

    session_id: str
    lines: list[dict[str, Any]] | None
    error: str | None = None
    retries: int = 0


def episode_lines(row: int, number: int, episode: Episode) -> EpisodeLines:
    """Episode `number` of `row` as its trajectory lines."""
    if episode.interactions is None:
        return EpisodeLines(episode.session_id, None, episode.error)
    lines = [_line(row, number, episode.session_id, n) for n in episode.interactions.values()]
    return EpisodeLines(episode.session_id, lines)


class RowWriter:
    """Appends a finished row's lines, then its ledger entry (the order resume relies on)."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir

    def write_row(self, row: int, episodes: list[EpisodeLines]) -> list[dict[str, Any]]:
        lines = [line for episode in episodes for line in episode.lines or ()]
        with (self.out_dir / TRAJECTORIES).open("ab") as handle:
            handle.write(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        ok = sum(e.lines is not None for e in episodes)
        entry = {
            "row": row,
            "episodes_ok": ok,
            "episodes_failed": len(episodes) - ok,
            "episodes_retried": sum(e.retries for e in episodes),
        }
        with (self.out_dir / LEDGER).open("ab") as handle:
            handle.write(orjson.dumps(entry) + b"\n")
        return lines


def write_batch(
    out_dir: Path,
    lines: Iterable[dict[str, Any]],
    pad_token_id: int = 0,
    style: ExportStyle = "individual",
) -> int:
    """`batch.safetensors` from trajectory lines; returns the number of lines (the batch size
    but for style "tree", whose batch is one pack per row)."""
    from safetensors.torch import save_file

    if style == "tree":
        return _write_packs(out_dir, list(lines))
    batch = padded_batch(lines, pad_token_id)
    if not batch:
        return 0
    save_file({k: v.contiguous() for k, v in batch.items()}, str(out_dir / BATCH))
    return int(batch["input_ids"].shape[0])


def _write_packs(out_dir: Path, lines: list[dict[str, Any]]) -> int:
    rows: dict[int, list[dict[str, Any]]] = {}
    for line in lines:
        rows.setdefault(line["row"], []).append(line)
    packs = []
    for row in sorted(rows):
        rewards = {line["interaction_id"]: float(line["reward"] or 0.0) for line in rows[row]}
        packs.append(pack_interactions(_interactions(rows[row]), rewards))
    if packs:
        save_packs(out_dir / BATCH, packs)
    return len(lines)


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
