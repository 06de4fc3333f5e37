"""`POST /v1/responses/compact`: a conversation compacted by the model itself.

What the openai SDK's `responses.compact` sends (`model`, `input` or `previous_response_id`,
`instructions`) and what the Agents SDK's `OpenAIResponsesCompactionSession` reads back: a
`response.compaction` object whose `output` is every user message of the conversation followed by
one `compaction` item, and its `usage`.

OpenAI's compaction item is opaque (`encrypted_content`) and its server turns it back into
context. rltap does it with a real generation, recorded in the session like any call (so a
trainer sees the summary the policy wrote, and its tokens): the conversation, then a user
message asking for a summary that will stand in for it; the reply's text is the summary. The
compaction item carries that summary as plain text in `encrypted_content` (opaque to clients,
as OpenAI's); sent back as input, it becomes an assistant message holding the summary
(`input_items`), the model's own words about the turns it replaces.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rltap.protocols.openai_responses.input_items import InputItem
from rltap.protocols.openai_responses.request import ResponsesRequest, to_canonical
from rltap.protocols.openai_responses.response import ID_PREFIX, usage
from rltap.record.generation import CanonicalRequest, Generation

__all__ = [
    "COMPACTION_PROMPT",
    "CompactRequest",
    "compacted_body",
    "compaction_request",
]

COMPACTION_PROMPT = (
    "Summarise the conversation so far for yourself: what was asked, what you did and found, "
    "and what is left to do. Your summary will replace the conversation, so keep every fact "
    "you still need."
)


class CompactRequest(BaseModel):
    """A `POST /v1/responses/compact` body (unknown fields are ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str = ""
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)


def compaction_request(wire: CompactRequest) -> CanonicalRequest:
    """The generation that writes the summary: the conversation, then `COMPACTION_PROMPT`."""
    responses = ResponsesRequest(
        model=wire.model,
        input=wire.input,
        instructions=wire.instructions,
        previous_response_id=wire.previous_response_id,
        max_output_tokens=wire.max_output_tokens,
    )
    request = to_canonical(responses)
    request.messages = [*request.messages, {"role": "user", "content": COMPACTION_PROMPT}]
    request.rewrites = True
    return request


def _user_item(message: dict[str, Any], item_id: str) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        parts = [{"type": "input_text", "text": content}]
    else:
        parts = [
            {"type": "input_text", "text": part["text"]} if part.get("type") == "text" else part
            for part in content or []
        ]
    return {
        "type": "message",
        "id": item_id,
        "role": "user",
        "status": "completed",
        "content": parts,
    }


def compacted_body(messages: list[dict[str, Any]], generation: Generation) -> dict[str, Any]:
    """The `response.compaction` object: the user messages of the prompt (`messages`, without
    the summary request), then the compaction item holding the summary."""
    suffix = generation.interaction_id.removeprefix(ID_PREFIX)
    users = [m for m in messages[:-1] if m.get("role") == "user"]
    output = [_user_item(m, f"msg_{suffix}_u{i}") for i, m in enumerate(users)]
    summary = generation.output_message.get("content") or ""
    output.append({"type": "compaction", "id": f"cmp_{suffix}", "encrypted_content": summary})
    return {
        "id": generation.interaction_id,
        "object": "response.compaction",
        "created_at": int(generation.created),
        "output": output,
        "usage": usage(generation),
    }
