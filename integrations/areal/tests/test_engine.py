"""AReaL's direct mode on AReaL's own `RolloutWorkflow`, with an engine that follows AReaL's
engine API and AReaL's own `ModelRequest` / `ModelResponse` / `GenerationHyperparameters`."""

from __future__ import annotations

from typing import Any

import pytest
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest, ModelResponse
from areal.api.workflow_api import RolloutWorkflow

from rltap.areal import ArealOpenAI, InteractionWithTokenLogpReward
from rltap.testing.areal_engine import ScriptedArealEngine

QUESTION = [{"role": "user", "content": "what is 2 + 2?"}]


class DirectWorkflow(RolloutWorkflow):
    """AReaL's documented direct mode, the import path changed."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    async def arun_episode(
        self, engine: Any, data: dict[str, Any]
    ) -> dict[str, InteractionWithTokenLogpReward]:
        client = ArealOpenAI(engine=engine, tokenizer=self.tokenizer)
        messages: list[Any] = list(data["messages"])
        completion = await client.chat.completions.create(
            messages=messages, temperature=0.7, top_p=0.9, max_tokens=8, stop=["\n\n"]
        )
        messages += [completion.choices[0].message, {"role": "user", "content": "sure?"}]
        await client.chat.completions.create(messages=messages)
        client.set_last_reward(1.0)
        client.apply_reward_discount(turn_discount=0.9)
        return client.export_interactions(style="individual")


async def test_direct_mode_runs_an_areal_engine_on_areals_own_classes(tokenizer: Any) -> None:
    engine = ScriptedArealEngine(tokenizer, ["4", "yes"], response_class=ModelResponse, version=2)
    interactions = await DirectWorkflow(tokenizer).arun_episode(engine, {"messages": QUESTION})

    first, second = interactions.values()
    assert second.parent_id == first.interaction_id
    assert [first.reward, second.reward] == pytest.approx([0.9, 1.0])
    for request in engine.requests:
        assert type(request) is ModelRequest
        assert type(request.gconfig) is GenerationHyperparameters
        assert request.tokenizer is tokenizer
    settings, default = (request.gconfig for request in engine.requests)
    assert (settings.max_new_tokens, settings.temperature, settings.top_p) == (8, 0.7, 0.9)
    assert settings.stop == ["\n\n"]
    assert default.max_new_tokens == 512  # AReaL's client's default
    for call, (interaction, text) in enumerate(zip((first, second), ("4", "yes"), strict=True)):
        response = interaction.model_response
        assert response is not None
        assert response.input_tokens == engine.requests[call].input_ids
        assert response.output_tokens == [*tokenizer.encode(text), tokenizer.eos_token_id]
        expected = [-(call + 1) / (i + 2) for i in range(len(response.output_tokens))]
        assert response.output_logprobs == pytest.approx(expected)
        assert set(response.output_versions) == {2}
        tensors = interaction.to_tensor_dict()
        generated = tensors["loss_mask"][0].bool()
        assert tensors["input_ids"][0][generated].tolist() == response.output_tokens
        assert tensors["logprobs"][0][generated].tolist() == pytest.approx(expected)
