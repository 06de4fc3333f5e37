"""`rltap export`: a store's sessions as training files, in the styles of `rltap.tree.export`.

Every session's restored cache exports as a live one would (`InteractionCache.export_interactions`
or `export_tree`, rewards discounted along its tree); the files hold what comes out:

- `parquet` (pyarrow) and `jsonl`: one row per exported interaction (for `concat`, per branch;
  for `tree`, per session: its pack's per-token arrays and leaves), token columns as lists.
  Columns: `session_id`, `task_id`, `session_state` (`ended`, `reaped`, `interrupted`, ...),
  then an exported interaction's (`rltap.record.exported.ROW_COLUMNS`: its fields, the message
  lists as JSON text, `reward` discounted, then the token columns; in a store with policies,
  `OPTIONAL_COLUMNS`' `policy` after them, and a tree row's `interaction_policies`).
  `datasets.load_dataset("parquet", data_files=PATH)` reads the Parquet file as it is.
- `safetensors`: the batch `rltap rollout` writes (`individual` / `concat`: right-padded
  [B, L] tensors; `tree`: one pack per session, `rltap.record.pack_io.save_packs`).

Sessions open at a proxy's death are exported with `session_state` `interrupted`; calls that
failed are never rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import orjson

from rltap.record.exported import ExportedInteraction, token_columns
from rltap.record.pack_io import pack_arrays, save_packs
from rltap.store.parquet import write_parquet
from rltap.store.read import StoreReader
from rltap.store.rows import StoredSession
from rltap.tree.export import ExportStyle, padded_batch

__all__ = ["FILE_FORMATS", "ExportedFile", "FileFormat", "export_rows", "export_store"]

FileFormat = Literal["parquet", "jsonl", "safetensors"]
FILE_FORMATS: tuple[FileFormat, ...] = get_args(FileFormat)


@dataclass(frozen=True, slots=True)
class ExportedFile:
    path: Path
    sessions: int
    rows: int


def _session_columns(stored: StoredSession) -> dict[str, Any]:
    return {
        "session_id": stored.session_id,
        "task_id": stored.task_id,
        "session_state": stored.state,
    }


def _interaction_rows(
    stored: StoredSession, style: ExportStyle, discount: float
) -> Iterator[dict[str, Any]]:
    exported = stored.cache.export_interactions(style=style, reward_discount=discount)
    session = {
        "session_id": stored.session_id,
        "task_id": stored.task_id,
        "session_state": stored.state,
    }
    for node in exported.values():
        row = ExportedInteraction.of(node).to_row()
        yield session | row | token_columns(node.token_sequence())


def _tree_row(stored: StoredSession, discount: float) -> dict[str, Any] | None:
    pack = stored.cache.export_tree(reward_discount=discount)
    if not pack.interaction_ids:
        return None
    row = _session_columns(stored) | {"interaction_ids": pack.interaction_ids}
    if pack.interaction_policies is not None:
        row["interaction_policies"] = pack.interaction_policies
    row |= {name: array.tolist() for name, array in pack_arrays(pack).items()}
    row["leaves"] = [
        {"interaction_id": leaf.interaction_id, "reward": leaf.reward, "path": leaf.path.tolist()}
        for leaf in pack.leaves
    ]
    return row


def export_rows(
    reader: StoreReader, style: ExportStyle = "individual", discount: float = 1.0
) -> Iterator[dict[str, Any]]:
    """The rows of every session of `reader` in `style`, rewards discounted by `discount`."""
    for stored in reader.sessions():
        if style == "tree":
            row = _tree_row(stored, discount)
            if row is not None:
                yield row
        else:
            yield from _interaction_rows(stored, style, discount)


def export_store(
    source: Path,
    out: Path,
    file_format: FileFormat = "parquet",
    style: ExportStyle = "individual",
    discount: float = 1.0,
    pad_token_id: int = 0,
) -> ExportedFile:
    """Write the store at `source` (a store or a run folder) to `out` in `file_format`."""
    if file_format not in FILE_FORMATS:
        msg = f"format must be one of {', '.join(FILE_FORMATS)}, got {file_format!r}"
        raise ValueError(msg)
    reader = StoreReader(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    with reader:
        sessions = reader.session_count()
        rows = export_rows(reader, style, discount)
        if file_format == "jsonl":
            count = _write_jsonl(out, rows)
        elif file_format == "parquet":
            count = write_parquet(out, rows, style, policies=reader.has_policies())
        elif style == "tree":
            count = _write_packs(out, reader, discount)
        else:
            count = _write_batch(out, rows, pad_token_id)
    return ExportedFile(path=out, sessions=sessions, rows=count)


def _write_jsonl(out: Path, rows: Iterator[dict[str, Any]]) -> int:
    count = 0
    with out.open("wb") as handle:
        for row in rows:
            handle.write(orjson.dumps(row) + b"\n")
            count += 1
    return count


def _write_packs(out: Path, reader: StoreReader, discount: float) -> int:
    packs = [stored.cache.export_tree(reward_discount=discount) for stored in reader.sessions()]
    packs = [pack for pack in packs if pack.interaction_ids]
    save_packs(out, packs)
    return len(packs)


def _write_batch(out: Path, rows: Iterator[dict[str, Any]], pad_token_id: int) -> int:
    from safetensors.torch import save_file

    batch = padded_batch(rows, pad_token_id)
    save_file({key: value.contiguous() for key, value in batch.items()}, str(out))
    return int(batch["input_ids"].shape[0]) if batch else 0
