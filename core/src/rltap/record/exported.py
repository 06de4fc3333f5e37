"""One exported interaction, its fields written once; every export format derives from it.

`ExportedInteraction` holds what an export says of one recorded call besides its tokens. The
formats that carry it:

- the wire (`/export_trajectories`): `to_json()` plus the call's tensors
  (`rltap.record.tensor_codec`), read back by `from_json` and `rebuild`
  (`rltap.client.proxy.interactions_from_export`);
- `rltap rollout`'s `trajectories.jsonl`: a line is the row's place (`row`, `group`, `episode`,
  `session`), `to_json()` and `token_columns(sequence)`;
- `rltap export` (JSONL and Parquet): the session's columns, `to_row()` (the message lists as JSON
  text, for Arrow's fixed columns) and the token columns; `ROW_COLUMNS` is the Parquet schema's
  interaction part;
- the viewer's tree nodes: `summary()` (everything but the message lists) plus the call's status.

Token columns are the `TokenSequence`'s: `input_ids`, `loss_mask`, `logprobs`, `versions`.

An optional field (`policy`: the call's policy in a run of several, `rltap.config.policies`) is
in `to_json()`, `to_row()` and `summary()` only where it is set, so a run without policies
exports what it always did; `OPTIONAL_COLUMNS` are its table columns, which a Parquet export
adds when some call has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import orjson

from rltap.record.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    LogprobConvention,
    ModelResponse,
    StopReason,
    TokenSequence,
)

__all__ = [
    "OPTIONAL_COLUMNS",
    "ROW_COLUMNS",
    "TOKEN_COLUMNS",
    "ColumnKind",
    "ExportStyle",
    "ExportedInteraction",
    "token_columns",
]

# The export styles (`rltap.tree.export` says what each holds).
ExportStyle = Literal["individual", "concat", "tree"]

# How a column is stored in a table (Parquet): `json` columns are JSON text there.
ColumnKind = Literal["text", "json", "int", "float", "bool", "ints", "floats"]


def _kind(kind: ColumnKind, *, optional: bool = False) -> dict[str, Any]:
    return {"kind": kind, "optional": optional}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportedInteraction:
    """What an export says of one recorded call besides its tokens.

    `reward` is the exported (discounted) reward; `input_len` / `output_len` are the call's own
    prompt and output lengths (a `concat` branch's tokens are longer); `stop_reason` and
    `logprob_convention` are None for a call that did not complete (the viewer shows those).
    """

    interaction_id: str = field(metadata=_kind("text"))
    parent_id: str | None = field(default=None, metadata=_kind("text"))
    link: str | None = field(default=None, metadata=_kind("text"))
    agent_id: str | None = field(default=None, metadata=_kind("text"))
    reward: float | None = field(default=None, metadata=_kind("float"))
    messages: list[dict[str, Any]] = field(default_factory=list, metadata=_kind("json"))
    output_message_list: list[dict[str, Any]] | None = field(default=None, metadata=_kind("json"))
    output_text: str = field(default="", metadata=_kind("text"))
    input_len: int = field(default=0, metadata=_kind("int"))
    output_len: int = field(default=0, metadata=_kind("int"))
    stop_reason: str | None = field(default=None, metadata=_kind("text"))
    logprob_convention: str | None = field(default=None, metadata=_kind("text"))
    constrained: bool = field(default=False, metadata=_kind("bool"))
    # The policy that generated the call (its tokens' versions are that policy's); None: the
    # run's one policy, or the base model in a run of several.
    policy: str | None = field(default=None, metadata=_kind("text", optional=True))

    @classmethod
    def of(cls, node: InteractionWithTokenLogpReward) -> ExportedInteraction:
        response = node.model_response
        complete = response is not None and node.is_complete
        return cls(
            interaction_id=node.interaction_id,
            parent_id=node.parent_id,
            link=None if node.link is None else node.link.value,
            agent_id=node.agent_id,
            reward=node.reward,
            messages=node.messages,
            output_message_list=node.output_message_list,
            output_text=node.output_text,
            input_len=0 if response is None else response.input_len,
            output_len=response.output_len if complete and response is not None else 0,
            stop_reason=response.stop_reason.value if complete and response else None,
            logprob_convention=response.logprob_convention.value if complete and response else None,
            constrained=node.constrained,
            policy=node.policy,
        )

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> ExportedInteraction:
        """From `to_json()`'s keys (others, such as a line's `row`, are ignored; a key an older
        file lacks takes its default)."""
        return cls(**{name: item[name] for name in _NAMES if name in item})

    def to_json(self) -> dict[str, Any]:
        """Every field, an optional one only where it is set."""
        return {name: getattr(self, name) for name in _NAMES if self._shown(name)}

    def _shown(self, name: str) -> bool:
        return name not in _OPTIONAL_NAMES or getattr(self, name) is not None

    def to_row(self) -> dict[str, Any]:
        """`to_json()` with the `json` columns as JSON text."""
        row = self.to_json()
        for name in _JSON_NAMES:
            row[name] = orjson.dumps(row[name]).decode()
        return row

    def summary(self) -> dict[str, Any]:
        """`to_json()` without the message lists."""
        return {
            name: getattr(self, name)
            for name in _NAMES
            if name not in _JSON_NAMES and self._shown(name)
        }

    def rebuild(
        self,
        sequence: TokenSequence,
        parent: InteractionWithTokenLogpReward | None,
        *,
        own_sequence: bool,
    ) -> InteractionWithTokenLogpReward:
        """The interaction again, for training: its tokens are `sequence`, which is the call's
        own (prompt, then its output: `own_sequence`) or a whole `concat` branch's. The reward
        is the float32 value the tensors held."""
        sequence.constrained = self.constrained
        response = None
        if own_sequence:
            start = self.input_len
            response = ModelResponse(
                input_tokens=sequence.input_ids[:start],
                output_tokens=sequence.input_ids[start:],
                output_logprobs=sequence.logprobs[start:],
                output_versions=sequence.versions[start:],
                stop_reason=StopReason(self.stop_reason or StopReason.STOP),
                logprob_convention=LogprobConvention(
                    self.logprob_convention or LogprobConvention.TEMPERATURE_SCALED
                ),
                constrained=self.constrained,
            )
        return InteractionWithTokenLogpReward(
            model_response=response,
            reward=float(np.float32(self.reward or 0.0)),
            parent=parent,
            detached_parent_id=self.parent_id,
            link=Link(self.link) if self.link else None,
            agent_id=self.agent_id,
            policy=self.policy,
            messages=self.messages,
            output_message_list=self.output_message_list,
            interaction_id=self.interaction_id,
            status=InteractionStatus.COMPLETE,
            export_sequence=sequence,
        )


_FIELDS = dataclasses.fields(ExportedInteraction)
_NAMES = tuple(f.name for f in _FIELDS)
_JSON_NAMES = tuple(f.name for f in _FIELDS if f.metadata["kind"] == "json")
_OPTIONAL_NAMES = frozenset(f.name for f in _FIELDS if f.metadata["optional"])

TOKEN_COLUMNS: tuple[tuple[str, ColumnKind], ...] = (
    ("input_ids", "ints"),
    ("loss_mask", "ints"),
    ("logprobs", "floats"),
    ("versions", "ints"),
)
# An exported interaction as a table's columns (`to_row()` and `token_columns`), in order.
ROW_COLUMNS: tuple[tuple[str, ColumnKind], ...] = (
    *((f.name, f.metadata["kind"]) for f in _FIELDS if not f.metadata["optional"]),
    *TOKEN_COLUMNS,
)
# The columns of the optional fields, after `ROW_COLUMNS` where a table has them.
OPTIONAL_COLUMNS: tuple[tuple[str, ColumnKind], ...] = tuple(
    (f.name, f.metadata["kind"]) for f in _FIELDS if f.metadata["optional"]
)


def token_columns(sequence: TokenSequence) -> dict[str, list[int] | list[float]]:
    """The token columns of `sequence` by name (`TOKEN_COLUMNS`)."""
    return {name: getattr(sequence, name) for name, _ in TOKEN_COLUMNS}
