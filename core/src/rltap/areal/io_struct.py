"""AReaL 1.0.4's engine request and response shapes (`areal.api.io_struct`), and their
conversion to rltap's.

An AReaL engine (anything with `agenerate(ModelRequest) -> ModelResponse` and `get_version()`:
RemoteSGLangEngine, RemotevLLMEngine) is handed AReaL's own classes when the `areal` package is
installed (`request_classes`), else these copies of their fields and defaults, which such an
engine reads the same way. Its responses are read by attribute, whichever class they are.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rltap.record.types import LogprobConvention, StopReason
from rltap.record.types import ModelResponse as RltapResponse

__all__ = [
    "GenerationHyperparameters",
    "ModelRequest",
    "ModelResponse",
    "request_classes",
    "to_rltap_response",
]

AReaLStopReason = Literal["length", "stop", "tool_calls", "abort"]


@dataclass
class GenerationHyperparameters:
    """AReaL's sampling settings of one request (`areal.api.cli_args`)."""

    n_samples: int = 1
    max_new_tokens: int = 16384
    min_new_tokens: int = 0
    max_tokens: int = 32768  # prompt and generated tokens together
    greedy: bool = False
    top_p: float = 1.0
    top_k: int = int(1e8)  # AReaL's "no top-k"
    temperature: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    stop: list[str] | None = None
    frequency_penalty: float = 0.0
    lora_name: str = "default_lora"
    use_beam_search: bool = False

    def new(self, **kwargs: Any) -> GenerationHyperparameters:
        return GenerationHyperparameters(**{**asdict(self), **kwargs})


@dataclass
class ModelRequest:
    """What AReaL's engines take: token ids, sampling settings, the tokenizer, images."""

    rid: str = field(default_factory=lambda: str(uuid.uuid4()))
    input_ids: list[int] = field(default_factory=list)
    gconfig: GenerationHyperparameters = field(default_factory=GenerationHyperparameters)
    metadata: dict[str, Any] = field(default_factory=dict)
    tokenizer: Any = None
    image_data: list[str] | None = field(default_factory=list)
    processor: Any = None
    vision_msg_vllm: list[Any] | None = None

    def copy(self) -> ModelRequest:
        return ModelRequest(
            rid=self.rid,
            input_ids=list(self.input_ids),
            gconfig=self.gconfig.new(),
            metadata=dict(self.metadata),
            tokenizer=self.tokenizer,
            image_data=None if self.image_data is None else list(self.image_data),
            processor=self.processor,
            vision_msg_vllm=None if self.vision_msg_vllm is None else list(self.vision_msg_vllm),
        )


@dataclass
class ModelResponse:
    """What AReaL's engines return: the prompt's and the reply's tokens, logprobs, versions."""

    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_versions: list[int] = field(default_factory=list)
    stop_reason: AReaLStopReason = "stop"
    tokenizer: Any = None
    input_images: list[Any] = field(default_factory=list)
    processor: Any = None
    latency: float = float("inf")
    ttft: float = float("inf")
    itl: list[float] = field(default_factory=list)
    routed_experts: Any = None

    @property
    def input_len(self) -> int:
        return len(self.input_tokens)

    @property
    def output_len(self) -> int:
        return len(self.output_tokens)


def request_classes() -> tuple[type[Any], type[Any]]:
    """`(ModelRequest, GenerationHyperparameters)`: AReaL's own when it is installed."""
    try:
        from areal.api.cli_args import GenerationHyperparameters as AReaLConfig
        from areal.api.io_struct import ModelRequest as AReaLRequest
    except ImportError:
        return ModelRequest, GenerationHyperparameters
    return AReaLRequest, AReaLConfig


# "tool_calls" is what AReaL's client sets after parsing a call; the tokens stopped normally.
_STOP_REASONS = {
    "stop": StopReason.STOP,
    "tool_calls": StopReason.STOP,
    "length": StopReason.LENGTH,
    "abort": StopReason.ABORT,
}


def to_rltap_response(
    response: Any, convention: LogprobConvention = LogprobConvention.RAW
) -> RltapResponse:
    """An AReaL-shaped response (AReaL's class, these copies, or rltap's own) as rltap's.

    Raises ValueError when its lists disagree in length or its stop reason is not AReaL's.
    """
    if isinstance(response, RltapResponse):
        return response
    reason = str(response.stop_reason)
    if reason not in _STOP_REASONS:
        msg = f"stop_reason must be one of {sorted(_STOP_REASONS)}, got {reason!r}"
        raise ValueError(msg)
    latency = float(getattr(response, "latency", 0.0))
    return RltapResponse(
        input_tokens=list(response.input_tokens),
        output_tokens=list(response.output_tokens),
        output_logprobs=[float(x) for x in response.output_logprobs],
        output_versions=[int(v) for v in response.output_versions],
        stop_reason=_STOP_REASONS[reason],
        logprob_convention=convention,
        latency=latency if math.isfinite(latency) else 0.0,
    )
