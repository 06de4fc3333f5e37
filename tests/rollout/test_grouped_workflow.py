"""GroupedRolloutWorkflow: a row's episodes run together and come back merged."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest
import torch

from rltap.record.types import InteractionWithTokenLogpReward, TokenSequence
from rltap.rollout.workflow import (
    EpisodeResult,
    GroupedRolloutWorkflow,
    OpenAIProxyWorkflow,
    RolloutWorkflow,
    WorkflowSettings,
    resolve_workflow,
)
from rltap.testing.proxy import RunningProxy


class GroupMemberAgent:
    """Member k of a group (in start order) asks k + 1 questions; members in `failing` raise."""

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.started = 0

    async def run(self, data: Any, base_url: str, api_key: str, http_client: Any) -> float:
        member = self.started
        self.started += 1
        client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=http_client)
        messages: list[Any] = []
        for turn in range(member + 1):
            messages.append({"role": "user", "content": f"{data} from member {member} ({turn})"})
            completion = await client.chat.completions.create(model="tiny", messages=messages)
            messages.append({"role": "assistant", "content": completion.choices[0].message.content})
        if member in self.failing:
            msg = f"member {member} failed"
            raise RuntimeError(msg)
        return 1.0


def tensor_batch(result: EpisodeResult) -> dict[str, torch.Tensor]:
    assert isinstance(result, dict)
    tensors = {key: value for key, value in result.items() if isinstance(value, torch.Tensor)}
    assert len(tensors) == len(result)
    return tensors


MakeGroup = Callable[..., GroupedRolloutWorkflow]


@pytest.fixture
async def make_group(proxy: RunningProxy) -> AsyncIterator[MakeGroup]:
    made: list[GroupedRolloutWorkflow] = []

    def make(failing: set[int], **options: Any) -> GroupedRolloutWorkflow:
        group = resolve_workflow(
            GroupMemberAgent(failing),
            group_size=3,
            proxy_addr=proxy.url,
            admin_key=proxy.admin_key,
            settings=WorkflowSettings(**options),
        )
        assert isinstance(group, GroupedRolloutWorkflow)
        made.append(group)
        return group

    yield make
    for group in made:
        assert isinstance(group.workflow, OpenAIProxyWorkflow)
        await group.workflow.aclose()
    assert proxy.state.store.open_sessions == 0


async def test_interactions_of_the_members_are_merged_by_id(make_group: MakeGroup) -> None:
    group = make_group(failing={1})
    merged = await group.arun_episode(None, "hi")

    assert isinstance(merged, dict)
    asked = sorted(node.messages[-1]["content"] for node in merged.values())
    assert asked == [
        "hi from member 0 (0)",
        "hi from member 2 (0)",
        "hi from member 2 (1)",
        "hi from member 2 (2)",
    ]
    assert all(interaction_id == node.interaction_id for interaction_id, node in merged.items())
    assert isinstance(group.workflow, OpenAIProxyWorkflow)
    assert group.workflow.failures == 1


async def test_tensor_dicts_of_the_members_are_stacked_and_padded(make_group: MakeGroup) -> None:
    group = make_group(failing={1}, return_tensors=True)
    batch = tensor_batch(await group.arun_episode(None, "hi"))

    dtypes = {key: tensor.dtype for key, tensor in batch.items()}
    assert dtypes == {
        "input_ids": torch.int32,
        "loss_mask": torch.int32,
        "logprobs": torch.float32,
        "versions": torch.int32,
        "attention_mask": torch.bool,
        "rewards": torch.float32,
    }
    # Member 0's one interaction and member 2's three, right-padded to the longest.
    assert batch["rewards"].shape == (4,)
    longest = batch["input_ids"].shape[1]
    assert all(batch[key].shape == (4, longest) for key in dtypes if key != "rewards")
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    assert max(lengths) == longest
    assert min(lengths) < longest
    short = lengths.index(min(lengths))
    tail = slice(min(lengths), longest)
    assert not batch["attention_mask"][short, tail].any()
    assert (batch["input_ids"][short, tail] == 0).all()
    assert (batch["loss_mask"][short, tail] == 0).all()
    assert (batch["versions"][short, tail] == -1).all()
    assert batch["loss_mask"].sum() > 0
    assert batch["rewards"].tolist() == [1.0, 1.0, 1.0, 1.0]


async def test_a_group_where_every_member_fails_is_rejected(make_group: MakeGroup) -> None:
    group = make_group(failing={0, 1, 2})
    assert await group.arun_episode(None, "hi") is None
    assert isinstance(group.workflow, OpenAIProxyWorkflow)
    assert group.workflow.failures == 3


class CannedWorkflow(RolloutWorkflow):
    """Returns the given results, one per episode, in the order the episodes start."""

    def __init__(self, results: list[EpisodeResult]) -> None:
        self.results = list(results)

    async def arun_episode(self, engine: Any, data: Any) -> EpisodeResult:
        return self.results.pop(0)


def _tensors(length: int) -> dict[str, torch.Tensor]:
    sequence = TokenSequence(
        input_ids=list(range(1, length + 1)),
        loss_mask=[0] + [1] * (length - 1),
        logprobs=[0.0] + [-0.5] * (length - 1),
        versions=[-1] + [0] * (length - 1),
    )
    return sequence.to_tensor_dict(1.0)


NODE_A = InteractionWithTokenLogpReward(interaction_id="a")
NODE_B = InteractionWithTokenLogpReward(interaction_id="b")


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        pytest.param([None, None], None, id="all-rejected"),
        pytest.param([{"a": NODE_A}, None, {"b": NODE_B}], {"a": NODE_A, "b": NODE_B}, id="by-id"),
        # An episode that made no LLM call exports an empty dict of either kind.
        pytest.param([{}, {"a": NODE_A}], {"a": NODE_A}, id="empty-and-interactions"),
        pytest.param([{}, {}], {}, id="all-empty"),
    ],
)
async def test_merging_the_results_of_a_group(
    results: list[EpisodeResult], expected: EpisodeResult
) -> None:
    group = GroupedRolloutWorkflow(CannedWorkflow(results), group_size=len(results))
    assert await group.arun_episode(None, "row") == expected


async def test_an_empty_episode_does_not_break_stacking_tensors() -> None:
    results: list[EpisodeResult] = [_tensors(3), {}, _tensors(5)]
    group = GroupedRolloutWorkflow(CannedWorkflow(results), group_size=3)
    batch = tensor_batch(await group.arun_episode(None, "row"))
    assert batch["input_ids"].tolist() == [[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]]
    assert batch["attention_mask"].sum(dim=1).tolist() == [3, 5]
