"""The files of a rollout folder (`rltap rollout`'s and each `rltap train` step's), which the
`rltap.rollout` docstring describes: writing a finished row, reading the lines back, resuming.

A row is written only once all its episodes ended, lines first and its ledger entry last, so a
run cut short leaves lines of unfinished rows only, which `drop_unfinished` removes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rltap.export import ExportStyle, concat_padded_tensors
from rltap.record.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    ModelResponse,
    TokenSequence,
)

if TYPE_CHECKING:
    import torch

    from rltap.workflow import Episode

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
    "padded_batch",
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
    sequence = node.token_sequence()
    return {
        "row": row,
        "group": row,
        "episode": episode,
        "session": session_id,
        "interaction_id": node.interaction_id,
        "parent_id": node.parent_id,
        "link": None if node.link is None else node.link.value,
        "agent_id": node.agent_id,
        "messages": node.messages,
        "output_text": node.output_text,
        "input_ids": sequence.input_ids,
        "loss_mask": sequence.loss_mask,
        "logprobs": sequence.logprobs,
        "versions": sequence.versions,
        "reward": node.reward,
    }


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


def padded_batch(lines: Iterable[dict[str, Any]], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Trajectory lines (or `rltap export` rows: the same token columns) as one padded batch;
    empty for no lines."""
    tensors = []
    for line in lines:
        sequence = TokenSequence(
            input_ids=line["input_ids"],
            loss_mask=line["loss_mask"],
            logprobs=line["logprobs"],
            versions=line["versions"],
        )
        tensors.append(sequence.to_tensor_dict(float(line["reward"] or 0.0)))
    return concat_padded_tensors(tensors, pad_token_id=pad_token_id)


def _write_packs(out_dir: Path, lines: list[dict[str, Any]]) -> int:
    from rltap.record.pack import pack_interactions
    from rltap.record.pack_io import save_packs

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
        ids = line["input_ids"]
        start = len(ids) - sum(line["loss_mask"])
        response = ModelResponse(
            input_tokens=ids[:start],
            output_tokens=ids[start:],
            output_logprobs=line["logprobs"][start:],
            output_versions=line["versions"][start:],
        )
        built[line["interaction_id"]] = InteractionWithTokenLogpReward(
            model_response=response,
            # A parent another agent's filter left out: the call starts its own branch.
            parent=built.get(line["parent_id"] or ""),
            link=Link(line["link"]) if line["link"] else None,
            interaction_id=line["interaction_id"],
            messages=line["messages"],
            status=InteractionStatus.COMPLETE,
        )
    return list(built.values())


def load_batch(out_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(out_dir / BATCH))
