"""The data model: what goes into an engine, what comes out, and one recorded LLM call.

`InteractionWithTokenLogpReward` keeps the seed system's name, fields (as keywords) and
properties (`has_tensor_data`, `created_at`, `remaining_messages`) so code written for AReaL's
agentic workflow reads the same here. It names no wire API: the reply body a call was answered
with is kept under its API's name (`reply_bodies`), and `rltap.areal`'s subclass reads AReaL's
`completion` and `response` from there.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rltap.record.errors import InvalidRequest
from rltap.record.ids import random_hex

if TYPE_CHECKING:
    import torch

__all__ = [
    "Constraint",
    "InteractionStatus",
    "InteractionWithTokenLogpReward",
    "Link",
    "LogprobConvention",
    "ModelRequest",
    "ModelResponse",
    "StopReason",
    "TokenChunk",
    "TokenSequence",
]


class StopReason(enum.StrEnum):
    STOP = "stop"  # a stop token or stop string ended generation
    LENGTH = "length"  # max_new_tokens or the context ran out
    ABORT = "abort"  # cancelled by the caller (client disconnect, shutdown)


class LogprobConvention(enum.StrEnum):
    """Which distribution the recorded logprob of each output token was taken from.

    Under a `Constraint` every engine records the same convention as without one: the grammar's
    token mask is a sampling filter like top-k, so the logprob is the model's own (unmasked)
    distribution and a fresh forward pass reproduces it. `ModelResponse.constrained` (exported
    as `constrained`) says the tokens were sampled under a mask, so a trainer can drop or
    reweigh them.
    """

    # log_softmax(logits / temperature) of the sampled token, before top-p/top-k filtering:
    # the embedded transformers engine.
    TEMPERATURE_SCALED = "temperature_scaled"
    # log_softmax(logits) of the sampled token, no temperature: vLLM's default ("raw_logprobs").
    RAW = "raw"
    # log_softmax of the distribution actually sampled from (after temperature, top-p, top-k).
    PROCESSED = "processed"


class Link(enum.StrEnum):
    """How an interaction continues its parent (`rltap.tree.links` says how it is decided)."""

    ROOT = "root"  # continues nothing in the session
    PREFIX = "prefix"  # the parent's messages and reply, then more: its tokens continue too
    REWRITE = "rewrite"  # the same agent's conversation with its history or tools changed
    HANDOFF = "handoff"  # another agent took the conversation over
    SUBAGENT = "subagent"  # made while the parent's tool call was open, by another agent
    CARRY = "carry"  # carries the parent's reply in another form (text, relayed, transcript)


class InteractionStatus(enum.StrEnum):
    IN_FLIGHT = "in_flight"
    COMPLETE = "complete"
    FAILED = "failed"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraint:
    """What a reply must match, decoded under a grammar (structured outputs, forced tool calls).

    `grammar` is a Lark grammar in llguidance's dialect (it may embed `%json{...}` schemas); it
    holds the whole reply. `json_schema` is set when the whole reply is one JSON value of that
    schema, for engines that take a schema natively (vLLM's `structured_outputs.json`).
    `reason` names what asked for it ("response_format json_schema 'Weather'", "tool_choice
    'required'"), for error messages and the export.
    """

    grammar: str
    reason: str
    json_schema: dict[str, Any] | None = None


@dataclass(slots=True, kw_only=True)
class ModelRequest:
    """Token ids in, sampling parameters for the engine.

    Usage:
        ModelRequest(input_ids=[9707, 11], max_new_tokens=32, temperature=0.7, seed=1)
    """

    input_ids: list[int]
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    stop_token_ids: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    request_id: str = field(default_factory=random_hex)
    # The conversation the ids were rendered from. Token engines ignore it; the scripted engine
    # decides its reply from it.
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    # Tokens are sampled only where the grammar allows them (None: unconstrained).
    constraint: Constraint | None = None
    # The session (episode) the call belongs to: an engine router keeps a session's calls on
    # one server, where its prefix is cached. None: a call of no session.
    session_id: str | None = None
    # The policy (a LoRA adapter over the base model, by name) that generates the reply and
    # whose version its tokens carry. None: a single-policy run's policy, or the base model in
    # a run of several policies (an agent no policy serves).
    policy: str | None = None

    def __post_init__(self) -> None:
        if not self.input_ids:
            msg = "input_ids must not be empty"
            raise InvalidRequest(msg, param="input_ids")
        if self.max_new_tokens < 1:
            msg = f"max_new_tokens must be >= 1, got {self.max_new_tokens}"
            raise InvalidRequest(msg, param="max_tokens")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            msg = f"temperature must be a finite number >= 0, got {self.temperature}"
            raise InvalidRequest(msg, param="temperature")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            msg = f"top_p must be in (0, 1], got {self.top_p}"
            raise InvalidRequest(msg, param="top_p")
        if self.top_k < 0:
            msg = f"top_k must be >= 0 (0 disables it), got {self.top_k}"
            raise InvalidRequest(msg, param="top_k")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


@dataclass(slots=True, kw_only=True)
class TokenChunk:
    """Tokens an engine produced since its previous chunk, as they stream out.

    The last chunk of a stream carries `stop_reason`; it may hold no tokens.
    """

    token_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    stop_reason: StopReason | None = None


@dataclass(slots=True, kw_only=True)
class ModelResponse:
    """What an engine consumed and produced for one request, token for token."""

    input_tokens: list[int]
    output_tokens: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_versions: list[int] = field(default_factory=list)
    stop_reason: StopReason = StopReason.STOP
    logprob_convention: LogprobConvention = LogprobConvention.TEMPERATURE_SCALED
    # Sampled under a grammar's token mask (`ModelRequest.constraint`); the logprobs are still
    # the unmasked distribution's (see `LogprobConvention`).
    constrained: bool = False
    latency: float = 0.0  # seconds the engine spent on this request

    def __post_init__(self) -> None:
        n = len(self.output_tokens)
        if len(self.output_logprobs) != n or len(self.output_versions) != n:
            msg = (
                f"output_tokens ({n}), output_logprobs ({len(self.output_logprobs)}) and "
                f"output_versions ({len(self.output_versions)}) must have the same length"
            )
            raise ValueError(msg)

    @property
    def input_len(self) -> int:
        return len(self.input_tokens)

    @property
    def output_len(self) -> int:
        return len(self.output_tokens)

    def extend(self, chunk: TokenChunk) -> None:
        """Append a streamed chunk (the engines build their final response this way)."""
        self.output_tokens.extend(chunk.token_ids)
        self.output_logprobs.extend(chunk.logprobs)
        self.output_versions.extend(chunk.versions)
        if chunk.stop_reason is not None:
            self.stop_reason = chunk.stop_reason


@dataclass(slots=True, kw_only=True)
class TokenSequence:
    """One training sequence: ids with their loss mask, logprobs and versions, position-wise."""

    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    constrained: bool = False  # some output segment was sampled under a grammar's mask

    def append_prompt(self, ids: Sequence[int]) -> None:
        self.input_ids.extend(ids)
        self.loss_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))
        self.versions.extend([-1] * len(ids))

    def append_output(self, response: ModelResponse) -> None:
        self.input_ids.extend(response.output_tokens)
        self.loss_mask.extend([1] * response.output_len)
        self.logprobs.extend(response.output_logprobs)
        self.versions.extend(response.output_versions)
        self.constrained = self.constrained or response.constrained

    @classmethod
    def of_response(cls, response: ModelResponse) -> TokenSequence:
        seq = cls()
        seq.append_prompt(response.input_tokens)
        seq.append_output(response)
        return seq

    def to_arrays(self, reward: float) -> dict[str, np.ndarray]:
        """The training tensors as numpy arrays: what `to_tensor_dict` wraps, and what the
        proxy exports (without torch)."""
        return {
            "input_ids": np.array([self.input_ids], dtype=np.int32),
            "loss_mask": np.array([self.loss_mask], dtype=np.int32),
            "logprobs": np.array([self.logprobs], dtype=np.float32),
            "versions": np.array([self.versions], dtype=np.int32),
            "attention_mask": np.ones((1, len(self.input_ids)), dtype=np.bool_),
            "rewards": np.array([reward], dtype=np.float32),
        }

    def to_tensor_dict(self, reward: float) -> dict[str, torch.Tensor]:
        import torch

        return {name: torch.from_numpy(array) for name, array in self.to_arrays(reward).items()}


def _new_interaction_id() -> str:
    return f"chatcmpl-{random_hex()}"


@dataclass(eq=False, kw_only=True)
class InteractionWithTokenLogpReward:
    """One LLM call of an agent, recorded at the token level.

    `reward` is the reward assigned to this call itself. Exports hand out copies whose `reward`
    is the discounted value, so the cache is never mutated by an export and a retry gives the
    same result. `parent` is the interaction this call continues and `link` how (see
    `rltap.tree.links`); `agent_id` names the agent that made it, `policy` what generated it.
    """

    model_response: ModelResponse | None = None
    reward: float | None = None
    parent: InteractionWithTokenLogpReward | None = None
    # None until the cache resolves it: PREFIX when a parent was given, else found.
    link: Link | None = None
    agent_id: str | None = None
    # The policy that generated the reply (`ModelRequest.policy`: its agent's LoRA adapter in a
    # run of several policies), whose version its tokens carry. None: a single-policy run's
    # policy, or the base model (an agent no policy serves).
    policy: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    # How many leading `messages` are the call's own instructions (Responses `instructions`),
    # which a call continuing it by `previous_response_id` does not carry over.
    instruction_messages: int = 0
    output_message_list: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    # The reply body the call was answered with, under the name of the wire API that answered
    # (`rltap.protocols.ApiSpec.name`): what that API may read back (a stored response).
    reply_bodies: dict[str, Any] = field(default_factory=dict)
    chat_template_type: str = "hf"
    interaction_id: str = field(default_factory=_new_interaction_id)
    created: float = field(default_factory=time.time)
    status: InteractionStatus = InteractionStatus.IN_FLIGHT
    error: str | None = None
    # Set on export copies only: the whole branch (concat style) this interaction stands for.
    export_sequence: TokenSequence | None = None
    # The parent's id where the parent itself is not at hand: an export rebuilt without it
    # (another agent's, filtered out by `agents`).
    detached_parent_id: str | None = None

    @property
    def is_complete(self) -> bool:
        return self.status is InteractionStatus.COMPLETE

    @property
    def has_tensor_data(self) -> bool:
        return self.model_response is not None or self.export_sequence is not None

    @property
    def created_at(self) -> float:
        return self.created

    @property
    def remaining_messages(self) -> list[dict[str, Any]]:
        """The messages after the parent's conversation (all of them without a prefix parent)."""
        parent = self.token_parent
        if parent is None:
            return self.messages
        return self.messages[len(parent.messages) + len(parent.output_message_list or []) :]

    @property
    def parent_id(self) -> str | None:
        return self.detached_parent_id if self.parent is None else self.parent.interaction_id

    @property
    def token_parent(self) -> InteractionWithTokenLogpReward | None:
        """The parent whose token sequence this call's prompt continues: only along a prefix
        link; any other link starts a new sequence with its own full prompt."""
        return self.parent if self.link is Link.PREFIX else None

    @property
    def output_text(self) -> str:
        texts = []
        for message in self.output_message_list or []:
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
        return "".join(texts)

    @property
    def constrained(self) -> bool:
        """The exported tokens (this call, or its whole branch for `concat`) include tokens
        sampled under a grammar's mask."""
        if self.export_sequence is not None:
            return self.export_sequence.constrained
        return self.model_response is not None and self.model_response.constrained

    def token_sequence(self) -> TokenSequence:
        if self.export_sequence is not None:
            return self.export_sequence
        if self.model_response is None:
            msg = f"interaction {self.interaction_id} has no model response ({self.status})"
            raise ValueError(msg)
        return TokenSequence.of_response(self.model_response)

    def to_tensor_dict(self) -> dict[str, torch.Tensor]:
        """The training tensors: ids, masks, logprobs and versions shaped [1, L], rewards [1]."""
        return self.token_sequence().to_tensor_dict(self._reward_value())

    def to_arrays(self) -> dict[str, np.ndarray]:
        """`to_tensor_dict` as numpy arrays (no torch needed)."""
        return self.token_sequence().to_arrays(self._reward_value())

    def _reward_value(self) -> float:
        return 0.0 if self.reward is None else float(self.reward)

    def copy_for_export(
        self, *, reward: float | None, sequence: TokenSequence | None = None
    ) -> InteractionWithTokenLogpReward:
        return dataclasses.replace(self, reward=reward, export_sequence=sequence)
