"""Rows of `rltap.store.files` as a Parquet file (pyarrow), row group by row group.

The schema is explicit, so token columns are `list<int32>` / `list<float32>` (the export's
dtypes) whatever the first rows hold, and an empty store still writes a readable file. A store
with policies (`StoreReader.has_policies`) adds the optional columns: `policy` per row, or a
tree row's `interaction_policies` beside its `interaction_ids`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltap._lazy import require_module
from rltap.record.exported import OPTIONAL_COLUMNS, ROW_COLUMNS, ColumnKind
from rltap.record.pack_io import PACK_ARRAYS
from rltap.tree.export import ExportStyle

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["parquet_schema", "write_parquet"]

_FLOAT_ARRAYS = frozenset({"logprobs", "rewards", "advantages"})  # of a pack; the rest int32


def _pyarrow() -> Any:
    require_module("pyarrow.parquet", "rltap[store]", "Parquet export")
    import pyarrow as pa

    return pa


def parquet_schema(style: ExportStyle, *, policies: bool = False) -> pa.Schema:
    """The columns of a Parquet export in `style` (see `rltap.store.files`); with `policies`,
    the optional columns too."""
    pa = _pyarrow()
    ints, floats, text = pa.list_(pa.int32()), pa.list_(pa.float32()), pa.string()
    head = [("session_id", text), ("task_id", text), ("session_state", text)]
    if style == "tree":
        leaf = pa.struct([("interaction_id", text), ("reward", pa.float32()), ("path", ints)])
        per_token = [(name, floats if name in _FLOAT_ARRAYS else ints) for name in PACK_ARRAYS]
        ids = [("interaction_ids", pa.list_(text))]
        if policies:
            ids.append(("interaction_policies", pa.list_(text)))
        return pa.schema([*head, *ids, *per_token, ("leaves", pa.list_(leaf))])
    types: dict[ColumnKind, Any] = {
        "text": text, "json": text, "int": pa.int32(), "float": pa.float32(),
        "bool": pa.bool_(), "ints": ints, "floats": floats,
    }  # fmt: skip
    columns = [*ROW_COLUMNS, *(OPTIONAL_COLUMNS if policies else ())]
    return pa.schema([*head, *((name, types[kind]) for name, kind in columns)])


def write_parquet(
    out: Path,
    rows: Iterator[dict[str, Any]],
    style: ExportStyle,
    batch_rows: int = 2048,  # rows per row group: memory stays flat on a large store
    *,
    policies: bool = False,
) -> int:
    """Write `rows` to `out` (with `policies`, the optional columns too); returns how many."""
    pa = _pyarrow()
    schema = parquet_schema(style, policies=policies)
    count = 0
    with pa.parquet.ParquetWriter(str(out), schema) as writer:
        while batch := list(itertools.islice(rows, batch_rows)):
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count
