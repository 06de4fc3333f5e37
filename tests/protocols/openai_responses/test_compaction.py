"""`responses.compact`: the summary request, the `response.compaction` body, and a compaction
item sent back as input."""

from __future__ import annotations

from openai.types.responses import ResponseCompactionItem, ResponseUsage

from rltap.protocols import openai_responses as proto
from rltap.protocols.openai_responses.compaction import (
    COMPACTION_PROMPT,
    CompactRequest,
    compacted_body,
    compaction_request,
)

from .support import make_generation


def test_the_summary_is_asked_for_after_the_conversation() -> None:
    wire = CompactRequest.model_validate(
        {"model": "gpt-4.1", "instructions": "Be brief.", "input": "hi", "store": True}
    )
    request = compaction_request(wire)
    assert request.instructions == "Be brief."
    assert request.messages == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": COMPACTION_PROMPT},
    ]
    assert not request.stream


def test_the_body_is_the_user_messages_then_the_compaction_item() -> None:
    prompt = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": [{"type": "text", "text": "two"}]},
        {"role": "user", "content": COMPACTION_PROMPT},
    ]
    generation = make_generation(content="They asked twice.", interaction_id="resp_abc")
    body = compacted_body(prompt, generation)
    assert (body["id"], body["object"]) == ("resp_abc", "response.compaction")
    # User messages with input_text parts, as OpenAI answers (the SDK's output type says
    # output_text, which is why the Agents SDK dumps them with warnings=False).
    assert [(item["type"], item["role"], item["content"]) for item in body["output"][:2]] == [
        ("message", "user", [{"type": "input_text", "text": "one"}]),
        ("message", "user", [{"type": "input_text", "text": "two"}]),
    ]
    compaction = ResponseCompactionItem.model_validate(body["output"][2])
    assert (compaction.id, compaction.encrypted_content) == ("cmp_abc", "They asked twice.")
    assert len(body["output"]) == 3
    usage = ResponseUsage.model_validate(body["usage"])
    assert usage.output_tokens == generation.completion_tokens


def test_a_compaction_item_in_input_is_the_models_summary_turn() -> None:
    request = proto.parse_request(
        {
            "input": [
                {"role": "user", "content": "one"},
                {"type": "compaction", "id": "cmp_1", "encrypted_content": "They asked once."},
                {"role": "user", "content": "next"},
            ]
        }
    )
    assert request.messages == [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "They asked once."},
        {"role": "user", "content": "next"},
    ]
