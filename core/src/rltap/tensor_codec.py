"""Tensors as JSON: how `/export_trajectories` ships the training tensors.

Each tensor is `{"dtype": "int32" | "float32" | "bool", "shape": [1, L], "data": base64}` where
`data` is the tensor's values in C order, little-endian (bool: one byte each, 0 or 1).
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["decode_tensor", "decode_tensors", "encode_tensor", "encode_tensors"]

# By torch's own dtype names; torch is imported on first use, so the proxy imports without it.
_DTYPES: dict[str, np.dtype[Any]] = {
    "int32": np.dtype("<i4"),
    "float32": np.dtype("<f4"),
    "bool": np.dtype("?"),
}


def encode_tensor(tensor: torch.Tensor | np.ndarray) -> dict[str, Any]:
    """A torch tensor or a numpy array (the proxy's, without torch) as JSON."""
    if isinstance(tensor, np.ndarray):
        name, array = str(tensor.dtype), tensor
    else:
        name, array = str(tensor.dtype).removeprefix("torch."), tensor.detach().cpu().numpy()
    if name not in _DTYPES:
        msg = f"cannot encode dtype {tensor.dtype}; expected one of {sorted(_DTYPES)}"
        raise ValueError(msg)
    array = np.ascontiguousarray(array).astype(_DTYPES[name], copy=False)
    return {
        "dtype": name,
        "shape": list(array.shape),
        "data": base64.b64encode(array.tobytes()).decode("ascii"),
    }


def decode_tensor(encoded: Mapping[str, Any]) -> torch.Tensor:
    import torch

    name = encoded["dtype"]
    if name not in _DTYPES:
        msg = f"unknown dtype {name!r}; expected one of {sorted(_DTYPES)}"
        raise ValueError(msg)
    np_dtype = _DTYPES[name]
    array = np.frombuffer(base64.b64decode(encoded["data"]), dtype=np_dtype)
    if sys.byteorder != "little":
        array = array.astype(np_dtype.newbyteorder("="))
    return torch.from_numpy(array.copy()).reshape(encoded["shape"]).to(getattr(torch, name))


def encode_tensors(
    tensors: Mapping[str, torch.Tensor] | Mapping[str, np.ndarray],
) -> dict[str, dict[str, Any]]:
    return {key: encode_tensor(value) for key, value in tensors.items()}


def decode_tensors(encoded: Mapping[str, Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    return {key: decode_tensor(value) for key, value in encoded.items()}
