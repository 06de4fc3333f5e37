"""The data that crosses rltap's layers: the bottom package, importing nothing else of rltap.

- `types`: a request to an engine, its response, one recorded call
  (`InteractionWithTokenLogpReward`);
- `errors`: the `RltapError` hierarchy, each error's HTTP status in one place;
- `ids`: random ids;
- `tensor_codec`: tensors as JSON (numpy without torch; torch on request);
- `parsed`: a model's text as messages (content, reasoning, tool calls) and its stream deltas;
- `pack`, `pack_io`: the tree pack (a session's calls as one token trie), its wire and file
  forms;
- `exported`: one exported interaction, the fields every export format derives from.
"""

from __future__ import annotations

from rltap.record.errors import (
    AuthenticationError,
    CapacityExhausted,
    Conflict,
    ContextLengthExceeded,
    EngineError,
    EngineServerFailed,
    EngineTimeout,
    EngineUnavailable,
    ExportMismatch,
    InteractionNotFound,
    InvalidRequest,
    InvalidReward,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ProxyStartFailed,
    RltapError,
    SessionGone,
    StoreUnavailable,
    Terminated,
    ThreadNotFound,
    error_for_status,
)
from rltap.record.exported import (
    ROW_COLUMNS,
    TOKEN_COLUMNS,
    ColumnKind,
    ExportedInteraction,
    ExportStyle,
    token_columns,
)
from rltap.record.ids import (
    random_hex,
)
from rltap.record.pack import (
    PackLeaf,
    TreePack,
    merge_tries,
    pack_interactions,
)
from rltap.record.pack_io import (
    PACK_ARRAYS,
    concat_packs,
    decode_pack,
    encode_pack,
    load_packs,
    pack_arrays,
    save_packs,
)
from rltap.record.parsed import (
    ContentDelta,
    Delta,
    IdFactory,
    ParsedOutput,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
    fold_deltas,
    output_message,
    random_call_id,
    sequential_call_ids,
)
from rltap.record.tensor_codec import (
    TENSOR_ENVELOPES,
    TensorEnvelope,
    decode_array,
    decode_arrays,
    decode_tensor,
    decode_tensors,
    encode_tensor,
    encode_tensors,
)
from rltap.record.types import (
    Constraint,
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    LogprobConvention,
    ModelRequest,
    ModelResponse,
    StopReason,
    TokenChunk,
    TokenSequence,
)

__all__ = [
    "PACK_ARRAYS",
    "ROW_COLUMNS",
    "TENSOR_ENVELOPES",
    "TOKEN_COLUMNS",
    "AuthenticationError",
    "CapacityExhausted",
    "ColumnKind",
    "Conflict",
    "Constraint",
    "ContentDelta",
    "ContextLengthExceeded",
    "Delta",
    "EngineError",
    "EngineServerFailed",
    "EngineTimeout",
    "EngineUnavailable",
    "ExportMismatch",
    "ExportStyle",
    "ExportedInteraction",
    "IdFactory",
    "InteractionNotFound",
    "InteractionStatus",
    "InteractionWithTokenLogpReward",
    "InvalidRequest",
    "InvalidReward",
    "Link",
    "LogprobConvention",
    "ModelRequest",
    "ModelResponse",
    "NotFound",
    "PackLeaf",
    "ParsedOutput",
    "ParsedToolCall",
    "PayloadTooLarge",
    "PermissionDenied",
    "ProxyStartFailed",
    "ReasoningDelta",
    "RltapError",
    "SessionGone",
    "StopReason",
    "StoreUnavailable",
    "TensorEnvelope",
    "Terminated",
    "ThreadNotFound",
    "TokenChunk",
    "TokenSequence",
    "ToolCallArgumentsDelta",
    "ToolCallStartDelta",
    "TreePack",
    "concat_packs",
    "decode_array",
    "decode_arrays",
    "decode_pack",
    "decode_tensor",
    "decode_tensors",
    "encode_pack",
    "encode_tensor",
    "encode_tensors",
    "error_for_status",
    "fold_deltas",
    "load_packs",
    "merge_tries",
    "output_message",
    "pack_arrays",
    "pack_interactions",
    "random_call_id",
    "random_hex",
    "save_packs",
    "sequential_call_ids",
    "token_columns",
]
