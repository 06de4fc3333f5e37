"""Tensors as JSON: how `/export_trajectories` ships the training tensors, in two envelopes.

rltap's (`envelope="rltap"`): `{"dtype": "int32" | "float32" | "bool", "shape": [1, L],
"data": base64}`.

AReaL's (`envelope="areal"`, AReaL 1.0.4's `SerializedTensor`, which its
`deserialize_value` turns back into a torch tensor): `{"type": "tensor", "dtype": "torch.int32" |
"torch.float32" | "torch.bool", "shape": [1, L], "data": base64}`.

In both, `data` is the tensor's values in C order, little-endian (bool: one byte each, 0 or 1).
`decode_array` (numpy) and `decode_tensor` (torch) read either envelope.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = [
    "TENSOR_ENVELOPES",
    "TensorEnvelope",
    "decode_array",
    "decode_arrays",
    "decode_tensor",
    "decode_tensors",
    "encode_tensor",
    "encode_tensors",
]

# Also the export formats of `/export_trajectories` (`rltap.proxy.control`): each its own.
TensorEnvelope = Literal["rltap", "areal"]
TENSOR_ENVELOPES: tuple[TensorEnvelope, ...] = get_args(TensorEnvelope)

# By torch's own dtype names; torch is imported on first use, so the proxy imports without it.
_DTYPES: dict[str, np.dtype[Any]] = {
    "int32": np.dtype("<i4"),
    "float32": np.dtype("<f4"),
    "bool": np.dtype("?"),
}
# AReaL's envelope: its type marker, and its dtype names are `str(torch_dtype)`.
_AREAL_TYPE = "tensor"
_TORCH_PREFIX = "torch."


def encode_tensor(
    tensor: torch.Tensor | np.ndarray, envelope: TensorEnvelope = "rltap"
) -> dict[str, Any]:
    """A torch tensor or a numpy array (the proxy's, without torch) as JSON."""
    if isinstance(tensor, np.ndarray):
        name, array = str(tensor.dtype), tensor
    else:
        name, array = str(tensor.dtype).removeprefix(_TORCH_PREFIX), tensor.detach().cpu().numpy()
    if name not in _DTYPES:
        msg = f"cannot encode dtype {tensor.dtype}; expected one of {sorted(_DTYPES)}"
        raise ValueError(msg)
    array = np.ascontiguousarray(array).astype(_DTYPES[name], copy=False)
    data = base64.b64encode(array.tobytes()).decode("ascii")
    if envelope == "areal":
        dtype = _TORCH_PREFIX + name
        return {"type": _AREAL_TYPE, "data": data, "shape": list(array.shape), "dtype": dtype}
    return {"dtype": name, "shape": list(array.shape), "data": data}


def decode_array(encoded: Mapping[str, Any]) -> np.ndarray:
    """A numpy array from either envelope (AReaL's is the one with `"type": "tensor"`)."""
    name = encoded["dtype"]
    if encoded.get("type") == _AREAL_TYPE and isinstance(name, str):
        name = name.removeprefix(_TORCH_PREFIX)
    if name not in _DTYPES:
        msg = f"unknown dtype {encoded['dtype']!r}; expected one of {sorted(_DTYPES)}"
        raise ValueError(msg)
    np_dtype = _DTYPES[name]
    array = np.frombuffer(base64.b64decode(encoded["data"]), dtype=np_dtype)
    if sys.byteorder != "little":
        array = array.astype(np_dtype.newbyteorder("="))
    return array.reshape(encoded["shape"]).copy()


def decode_tensor(encoded: Mapping[str, Any]) -> torch.Tensor:
    """`decode_array` as a torch tensor (torch imported on first use)."""
    import torch

    return torch.from_numpy(decode_array(encoded))


def encode_tensors(
    tensors: Mapping[str, torch.Tensor] | Mapping[str, np.ndarray],
    envelope: TensorEnvelope = "rltap",
) -> dict[str, dict[str, Any]]:
    return {key: encode_tensor(value, envelope) for key, value in tensors.items()}


def decode_arrays(encoded: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    return {key: decode_array(value) for key, value in encoded.items()}


def decode_tensors(encoded: Mapping[str, Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    return {key: decode_tensor(value) for key, value in encoded.items()}
