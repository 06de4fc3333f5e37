from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rltap.record.types import InteractionWithTokenLogpReward, ModelResponse
from rltap.tree.cache import InteractionCache

Record = Callable[..., InteractionWithTokenLogpReward]


@pytest.fixture
def cache() -> InteractionCache:
    return InteractionCache()


@pytest.fixture
def record(cache: InteractionCache) -> Record:
    """Record one complete call in `cache`: prompt tokens continue the parent's (concat style)."""

    def _record(
        messages: list[dict[str, Any]],
        reply: str,
        *,
        new_prompt: list[int] | None = None,
        output: list[int] | None = None,
        reward: float | None = None,
        constrained: bool = False,
    ) -> InteractionWithTokenLogpReward:
        node = cache.add(InteractionWithTokenLogpReward(messages=messages))
        prefix: list[int] = []
        if node.parent is not None and node.parent.model_response is not None:
            parent_response = node.parent.model_response
            prefix = parent_response.input_tokens + parent_response.output_tokens
        output = output if output is not None else [len(cache) * 10 + 1, len(cache) * 10 + 2]
        response = ModelResponse(
            input_tokens=prefix + (new_prompt if new_prompt is not None else [7, 8]),
            output_tokens=output,
            output_logprobs=[-0.5] * len(output),
            output_versions=[3] * len(output),
            constrained=constrained,
        )
        cache.complete(node.interaction_id, response, [{"role": "assistant", "content": reply}])
        if reward is not None:
            cache.set_reward(node.interaction_id, reward)
        return node

    return _record
