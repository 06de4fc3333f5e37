"""A scripted proxy for adapter tests, and the checks every recorded episode must pass.

`scripted_proxy(script)` serves the tiny model behind the scripted engine on 127.0.0.1,
`embedded_proxy()` behind the embedded engine (the model and renderer are loaded once per
process). `check_episode` verifies what the matrix asserts of
each cell: parents link the turns, the recorded tokens are what the engine consumed and produced,
the logprobs equal a fresh forward pass, the reward sits on the right interaction, and the concat
export is one sequence per leaf with the loss mask on every generated segment.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.engines.base import InferenceEngine
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.testing.models import cached_tiny_model_dir
from rltap.testing.proxy import RunningProxy, start_test_proxy
from rltap.testing.scripts import tool_loop
from rltap.tree.export import branch_sequence

__all__ = [
    "FIDELITY_TOLERANCE",
    "EpisodeCheckError",
    "ProxyFactory",
    "check_episode",
    "embedded_engine",
    "embedded_proxy",
    "scripted_engine",
    "scripted_proxies",
    "scripted_proxy",
    "tiny_model",
    "tiny_renderer",
]

FIDELITY_TOLERANCE = 1e-5


class EpisodeCheckError(AssertionError):
    """A recorded episode broke one of the invariants; the message says which."""


@functools.cache
def tiny_model() -> Any:
    """The tiny test model, loaded once per process (fp32, eval mode)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(str(cached_tiny_model_dir()), dtype="float32")
    model.eval()  # type: ignore[no-untyped-call]
    return model


@functools.cache
def tiny_renderer() -> ChatRenderer:
    return ChatRenderer.from_pretrained(cached_tiny_model_dir(), mode="concat")


def scripted_engine(script: Any = tool_loop, **options: Any) -> InferenceEngine:
    from rltap.engines.scripted import ScriptedEngine

    return ScriptedEngine(script, tiny_model(), tokenizer=tiny_renderer().tokenizer, **options)


def embedded_engine(**options: Any) -> InferenceEngine:
    """The embedded engine sampling from the tiny model itself."""
    from rltap.engines.transformers import TransformersEngine

    return TransformersEngine(tiny_model(), tokenizer=tiny_renderer().tokenizer, **options)


@contextlib.asynccontextmanager
async def scripted_proxy(
    script: Any = tool_loop, *, capacity: int = 64, **engine_options: Any
) -> AsyncIterator[RunningProxy]:
    """A real proxy on 127.0.0.1 answering with `script` (default: the tool loop)."""
    engine = scripted_engine(script, **engine_options)
    async with _tiny_proxy(engine, capacity, reasoning_parser="qwen3") as proxy:
        yield proxy


@contextlib.asynccontextmanager
async def embedded_proxy(
    *, capacity: int = 64, **engine_options: Any
) -> AsyncIterator[RunningProxy]:
    """A real proxy on 127.0.0.1 in front of the embedded engine and the tiny model: what
    structured outputs run on, since there the grammar, not a script, shapes the reply.

    No reasoning parser: with one, a grammar lets the reply think first, in free text, and the
    random model, once inside `<think>`, all but never picks `</think>` out of 151k tokens.
    """
    async with _tiny_proxy(embedded_engine(**engine_options), capacity, None) as proxy:
        yield proxy


@contextlib.asynccontextmanager
async def _tiny_proxy(
    engine: InferenceEngine, capacity: int, reasoning_parser: str | None
) -> AsyncIterator[RunningProxy]:
    config = ServeConfig(
        chat=ChatConfig(
            max_context=4096, default_max_tokens=256, reasoning_parser=reasoning_parser
        ),
        limits=LimitsConfig(capacity=capacity, model_name="tiny"),
    )
    async with start_test_proxy(engine, tiny_renderer(), config) as proxy:
        yield proxy


ProxyFactory = Callable[..., Awaitable[RunningProxy]]


@contextlib.asynccontextmanager
async def scripted_proxies(**defaults: Any) -> AsyncIterator[ProxyFactory]:
    """Start scripted proxies on demand (`scripted_proxy` arguments over `defaults`); all of
    them stop when the block ends. Behind the integrations' `make_proxy` fixtures."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(script: Any = tool_loop, **options: Any) -> RunningProxy:
            running: RunningProxy = await stack.enter_async_context(
                scripted_proxy(script, **{**defaults, **options})
            )
            return running

        yield start


def _fail(message: str) -> None:
    raise EpisodeCheckError(message)


def _max_logprob_diff(node: InteractionWithTokenLogpReward) -> float:
    import torch

    response = node.model_response
    assert response is not None
    if not response.output_tokens:
        return 0.0
    sequence = torch.tensor([response.input_tokens + response.output_tokens])
    with torch.no_grad():
        logits = tiny_model()(input_ids=sequence).logits[0].float()
    fresh = torch.log_softmax(logits[response.input_len - 1 : -1], dim=-1)
    fresh = fresh.gather(1, torch.tensor(response.output_tokens)[:, None]).squeeze(1)
    recorded = torch.tensor(response.output_logprobs, dtype=torch.float32)
    return float((fresh - recorded).abs().max())


def check_episode(
    interactions: Mapping[str, InteractionWithTokenLogpReward],
    *,
    expected_interactions: int,
    expected_reward: float | None,
    discount: float,
) -> None:
    """Raise `EpisodeCheckError` unless a tool-loop episode was recorded as it must be.

    `interactions` is an individual-style export rebuilt by `OpenAIProxyClient` (each one with its
    model response). The turns must form one chain, each linked to the one before.
    """
    nodes = list(interactions.values())
    if len(nodes) != expected_interactions:
        _fail(f"expected {expected_interactions} interactions, got {len(nodes)}")
    for previous, node in itertools.pairwise(nodes):
        if node.parent is not previous:
            _fail(f"{node.interaction_id} is not linked to the turn before it ({node.parent_id})")
    for node in nodes:
        diff = _max_logprob_diff(node)
        if diff > FIDELITY_TOLERANCE:
            _fail(f"{node.interaction_id}: recorded logprobs differ from a forward pass by {diff}")
    if expected_reward is not None:
        for depth, node in enumerate(reversed(nodes)):
            wanted = expected_reward * discount**depth
            if node.reward is None or abs(node.reward - wanted) > 1e-6:
                _fail(f"{node.interaction_id}: reward {node.reward}, expected {wanted}")
    leaf = nodes[-1]
    sequence = branch_sequence(leaf)  # raises ExportMismatch if a prompt breaks its parent's
    segments = sum(
        1
        for i, mask in enumerate(sequence.loss_mask)
        if mask == 1 and (i == 0 or sequence.loss_mask[i - 1] == 0)
    )
    if segments != len(nodes):
        _fail(f"the concat sequence has {segments} generated segments for {len(nodes)} turns")
    generated = sum(len(n.model_response.output_tokens) for n in nodes if n.model_response)
    if sum(sequence.loss_mask) != generated:
        _fail(f"loss mask covers {sum(sequence.loss_mask)} tokens, {generated} were generated")
