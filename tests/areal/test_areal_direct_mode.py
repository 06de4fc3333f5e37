"""AReaL's documented direct mode with only the import path changed: a `RolloutWorkflow` whose
`arun_episode(engine, data)` talks to the engine through `ArealOpenAI`, called the way AReaL's
trainer calls it, returns the tensors AReaL trains on."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rltap.areal import ArealOpenAI, RolloutWorkflow
from rltap.testing.areal_engine import ScriptedArealEngine


class MultiTurnMathWorkflow(RolloutWorkflow):
    """AReaL's multi-turn math agent: retry after a wrong answer, reward 1 for the right one."""

    def __init__(self, tokenizer: Any, max_turns: int = 2) -> None:
        self.tokenizer = tokenizer
        self.max_turns = max_turns

    async def arun_episode(self, engine: Any, data: dict[str, Any]) -> Any:
        client = ArealOpenAI(engine=engine, tokenizer=self.tokenizer)
        messages = list(data["messages"])
        reward = 0.0
        for _ in range(self.max_turns):
            completion = await client.chat.completions.create(messages=messages)
            message = completion.choices[0].message
            if message.content == data["answer"]:
                reward = 1.0
                break
            messages += [message, {"role": "user", "content": "Wrong, try again."}]
        client.set_last_reward(reward)
        client.apply_reward_discount(turn_discount=0.9)
        return client.export_interactions(style="individual")


async def test_a_direct_mode_workflow_exports_areals_tensors(qwen_tokenizer: Any) -> None:
    engine = ScriptedArealEngine(qwen_tokenizer, ["5", "4"], version=2)
    workflow = MultiTurnMathWorkflow(qwen_tokenizer)
    data = {"messages": [{"role": "user", "content": "What is 2+2?"}], "answer": "4"}

    interactions = await workflow.arun_episode(engine, data)  # as AReaL's trainer calls it

    assert [node.reward for node in interactions.values()] == [0.9, 1.0]
    for node, request, call in zip(interactions.values(), engine.requests, (1, 2), strict=True):
        tensors = node.to_tensor_dict()
        prompt, output = list(request.input_ids), node.model_response.output_tokens
        length = len(prompt) + len(output)
        assert output[-1] == qwen_tokenizer.eos_token_id
        assert tensors["input_ids"].dtype == torch.int32
        assert tensors["input_ids"].tolist() == [prompt + output]
        assert tensors["loss_mask"].dtype == torch.int32
        assert tensors["loss_mask"].tolist() == [[0] * len(prompt) + [1] * len(output)]
        assert tensors["logprobs"].dtype == torch.float32
        engine_logprobs = [-call / (i + 2) for i in range(len(output))]
        expected = torch.tensor([[0.0] * len(prompt) + engine_logprobs], dtype=torch.float32)
        assert torch.equal(tensors["logprobs"], expected)
        assert tensors["versions"].dtype == torch.int32
        assert tensors["versions"].tolist() == [[-1] * len(prompt) + [2] * len(output)]
        assert tensors["attention_mask"].dtype == torch.bool
        assert tensors["attention_mask"].shape == (1, length)
        assert bool(tensors["attention_mask"].all())
        assert tensors["rewards"].dtype == torch.float32
        assert tensors["rewards"].tolist() == pytest.approx([node.reward])
