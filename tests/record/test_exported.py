"""One exported interaction (rltap.record.exported): each format carries its fields, and what an
export wrote reads back into the same interaction."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import orjson
import pytest

from rltap.record.exported import ROW_COLUMNS, TOKEN_COLUMNS, ExportedInteraction, token_columns
from rltap.record.tensor_codec import decode_array, encode_tensor
from rltap.record.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    LogprobConvention,
    ModelResponse,
    StopReason,
)
from rltap.tree.cache import InteractionCache


def _conversation() -> InteractionCache:
    cache = InteractionCache()
    first = InteractionWithTokenLogpReward(
        messages=[{"role": "user", "content": "hi"}],
        agent_id="planner",
        model_response=ModelResponse(
            input_tokens=[1, 2, 3],
            output_tokens=[4, 5],
            output_logprobs=[-0.5, -0.25],
            output_versions=[3, 3],
            stop_reason=StopReason.LENGTH,
            logprob_convention=LogprobConvention.RAW,
            constrained=True,
        ),
        output_message_list=[{"role": "assistant", "content": "he"}],
        status=InteractionStatus.COMPLETE,
    )
    cache[first.interaction_id] = first
    second = InteractionWithTokenLogpReward(
        messages=[
            *first.messages,
            *(first.output_message_list or []),
            {"role": "user", "content": "?"},
        ],
        model_response=ModelResponse(
            input_tokens=[1, 2, 3, 4, 5, 6],
            output_tokens=[7],
            output_logprobs=[-1.0],
            output_versions=[4],
        ),
        output_message_list=[{"role": "assistant", "content": "!"}],
        status=InteractionStatus.COMPLETE,
    )
    cache[second.interaction_id] = second
    cache.set_reward(second.interaction_id, 1.0)
    return cache


def test_every_field_survives_json_and_a_table_row() -> None:
    cache = _conversation()
    for node in cache.export_interactions(style="individual", reward_discount=0.5).values():
        exported = ExportedInteraction.of(node)
        assert ExportedInteraction.from_json(orjson.loads(orjson.dumps(exported.to_json()))) == (
            exported
        )
        row = exported.to_row()
        assert orjson.loads(row["messages"]) == node.messages
        assert [name for name in row] + [name for name, _ in TOKEN_COLUMNS] == [
            name for name, _ in ROW_COLUMNS
        ]


def test_the_first_call_is_exported_with_its_response_and_discounted_reward() -> None:
    cache = _conversation()
    first = next(iter(cache.export_interactions(style="individual", reward_discount=0.5).values()))
    item = ExportedInteraction.of(first).to_json()
    assert item | {"interaction_id": "x", "messages": []} == {
        "interaction_id": "x",
        "parent_id": None,
        "link": "root",
        "agent_id": "planner",
        "reward": 0.5,
        "messages": [],
        "output_message_list": [{"role": "assistant", "content": "he"}],
        "output_text": "he",
        "input_len": 3,
        "output_len": 2,
        "stop_reason": "length",
        "logprob_convention": "raw",
        "constrained": True,
    }


@pytest.mark.parametrize("style", ["individual", "concat"])
def test_a_rebuilt_interaction_gives_the_same_tensors(style: str) -> None:
    cache = _conversation()
    exported = cache.export_interactions(style=style, reward_discount=0.5)  # type: ignore[arg-type]
    rebuilt: dict[str, InteractionWithTokenLogpReward] = {}
    for node in exported.values():
        record = ExportedInteraction.from_json(ExportedInteraction.of(node).to_json())
        parent = rebuilt.get(record.parent_id or "")
        sequence = type(node.token_sequence())(**token_columns(node.token_sequence()))
        again = record.rebuild(sequence, parent, own_sequence=style == "individual")
        rebuilt[again.interaction_id] = again
        for name, array in node.to_arrays().items():
            np.testing.assert_array_equal(again.to_arrays()[name], array, err_msg=name)
        assert again.parent_id == node.parent_id
        assert again.link == node.link
        if style == "individual":
            assert again.model_response is not None
            assert node.model_response is not None
            assert again.model_response.stop_reason == node.model_response.stop_reason
            assert again.model_response.input_len == node.model_response.input_len


def test_a_call_that_did_not_complete_has_no_stop_reason_and_no_output() -> None:
    node = InteractionWithTokenLogpReward(
        model_response=ModelResponse(input_tokens=[1, 2], output_tokens=[3], output_logprobs=[-1.0],
                                     output_versions=[0]),
        status=InteractionStatus.FAILED,
    )  # fmt: skip
    summary = ExportedInteraction.of(node).summary()
    assert (summary["input_len"], summary["output_len"], summary["stop_reason"]) == (2, 0, None)
    assert "messages" not in summary


def test_an_array_decodes_without_torch() -> None:
    encoded = encode_tensor(np.array([[1, -1, 7]], dtype=np.int32))
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "from rltap.record.tensor_codec import decode_array\n"
        f"print(decode_array({encoded!r}).tolist())\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[[1, -1, 7]]"
    assert decode_array(encoded).dtype == np.int32
