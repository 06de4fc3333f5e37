"""Token columns as compact blobs: little-endian int32 ids and versions, float32 logprobs.

Four bytes a token instead of a JSON number's six to twenty; the same dtypes as every export
(`rltap.record.types.TokenSequence.to_arrays`), so a blob reads back into the export's arrays at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["float_blob", "floats", "int_blob", "ints"]

_INT = np.dtype("<i4")
_FLOAT = np.dtype("<f4")


def int_blob(values: Sequence[int]) -> bytes:
    return np.asarray(values, dtype=_INT).tobytes()


def float_blob(values: Sequence[float]) -> bytes:
    return np.asarray(values, dtype=_FLOAT).tobytes()


def ints(blob: bytes) -> list[int]:
    values: list[int] = np.frombuffer(blob, dtype=_INT).tolist()
    return values


def floats(blob: bytes) -> list[float]:
    values: list[float] = np.frombuffer(blob, dtype=_FLOAT).tolist()
    return values
