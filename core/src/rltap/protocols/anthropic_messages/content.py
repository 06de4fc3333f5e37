"""Anthropic content blocks: their wire models, and how messages of them become canonical ones.

See `rltap.protocols.anthropic_messages.request` for the rules (tool results as tool messages,
one assistant message per turn, blocks the model cannot read taken out and listed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Discriminator, Tag

from rltap.record.errors import InvalidRequest
from rltap.record.generation import UnsupportedContent

__all__ = [
    "ContentBlockParam",
    "DocumentBlockParam",
    "MessageParam",
    "OtherBlockParam",
    "RedactedThinkingBlockParam",
    "TextBlockParam",
    "ThinkingBlockParam",
    "ToolResultBlockParam",
    "ToolUseBlockParam",
    "canonical_messages",
    "document_text",
]


class _WireModel(BaseModel):
    # Lenient like the API's clients expect: fields rltap does not use are accepted and ignored.
    model_config = ConfigDict(extra="allow")


class TextBlockParam(_WireModel):
    type: Literal["text"]
    text: str


class ToolUseBlockParam(_WireModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ThinkingBlockParam(_WireModel):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlockParam(_WireModel):
    type: Literal["redacted_thinking"]
    data: str


class DocumentBlockParam(_WireModel):
    """A `document` block; the model reads a plain-text one (`document_text`)."""

    type: Literal["document"]
    source: dict[str, Any]
    title: str | None = None
    context: str | None = None


class OtherBlockParam(_WireModel):
    """Any other block (image, search_result, ...): one the model cannot read."""

    type: str


def document_text(block: DocumentBlockParam) -> str | None:
    """The text a plain-text document stands for: its title, its context, then its text (a
    `text` source, or a `content` source's text blocks), a blank line apart; None for a source
    the model cannot read (a base64 PDF, a URL, content with other blocks)."""
    source = block.source
    kind = source.get("type")
    body: str | None = None
    if kind == "text" and source.get("media_type", "text/plain") == "text/plain":
        data = source.get("data")
        body = data if isinstance(data, str) else None
    elif kind == "content":
        content = source.get("content")
        if isinstance(content, str):
            body = content
        elif isinstance(content, list) and all(_is_text_block(part) for part in content):
            body = "".join(part["text"] for part in content)
    if body is None:
        return None
    return "\n\n".join(part for part in (block.title, block.context, body) if part)


def _is_text_block(part: object) -> bool:
    return (
        isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    )


def _document_part(
    block: DocumentBlockParam, where: str, unsupported: list[UnsupportedContent]
) -> str | None:
    """The text of a document block, or None with the block listed as unsupported (its
    `source` named: that is what the model cannot read)."""
    text = document_text(block)
    if text is None:
        unsupported.append(UnsupportedContent(type="document", param=f"{where}.source"))
    return text


def _block_tag(value: Any) -> str:
    # Tags are class names so that `_validation` drops them from the reported parameter path.
    kind = value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)
    return _BLOCK_TAGS.get(kind, "OtherBlockParam") if isinstance(kind, str) else "OtherBlockParam"


ToolResultContentParam = Annotated[
    Annotated[TextBlockParam, Tag("TextBlockParam")]
    | Annotated[DocumentBlockParam, Tag("DocumentBlockParam")]
    | Annotated[OtherBlockParam, Tag("OtherBlockParam")],
    Discriminator(_block_tag),
]


class ToolResultBlockParam(_WireModel):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultContentParam] | None = None
    is_error: bool | None = None


_BLOCK_TAGS = {
    "text": "TextBlockParam",
    "tool_use": "ToolUseBlockParam",
    "tool_result": "ToolResultBlockParam",
    "thinking": "ThinkingBlockParam",
    "redacted_thinking": "RedactedThinkingBlockParam",
    "document": "DocumentBlockParam",
}

ContentBlockParam = Annotated[
    Annotated[TextBlockParam, Tag("TextBlockParam")]
    | Annotated[ToolUseBlockParam, Tag("ToolUseBlockParam")]
    | Annotated[ToolResultBlockParam, Tag("ToolResultBlockParam")]
    | Annotated[ThinkingBlockParam, Tag("ThinkingBlockParam")]
    | Annotated[RedactedThinkingBlockParam, Tag("RedactedThinkingBlockParam")]
    | Annotated[DocumentBlockParam, Tag("DocumentBlockParam")]
    | Annotated[OtherBlockParam, Tag("OtherBlockParam")],
    Discriminator(_block_tag),
]


class MessageParam(_WireModel):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlockParam]


def canonical_messages(
    system: str | list[TextBlockParam] | None,
    messages: list[MessageParam],
    unsupported: list[UnsupportedContent],
) -> list[dict[str, Any]]:
    """The canonical messages of `system` and `messages`; blocks the model cannot read are left
    out and listed in `unsupported` with their path."""
    canonical: list[dict[str, Any]] = []
    if isinstance(system, list):
        text = _content_of_parts([{"type": "text", "text": b.text} for b in system])
        if text:
            canonical.append({"role": "system", "content": text})
    elif system:
        canonical.append({"role": "system", "content": system})
    for i, message in enumerate(messages):
        if message.role == "assistant":
            canonical.append(_assistant_message(message.content, i))
        else:
            canonical.extend(_user_messages(message.content, i, unsupported))
    return canonical


def _assistant_message(content: str | list[Any], i: int) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        if isinstance(block, TextBlockParam):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlockParam):
            reasoning.append(block.thinking)
        elif isinstance(block, ToolUseBlockParam):
            arguments = orjson.dumps(block.input).decode()
            function = {"name": block.name, "arguments": arguments}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif not isinstance(block, RedactedThinkingBlockParam):
            msg = f"content block type {block.type!r} is not supported in assistant messages"
            raise InvalidRequest(msg, param=f"messages[{i}].content[{j}].type")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    return message


def _user_messages(
    content: str | list[Any], i: int, unsupported: list[UnsupportedContent]
) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        if isinstance(block, ToolResultBlockParam):
            if parts:
                messages.append({"role": "user", "content": _content_of_parts(parts)})
                parts = []
            messages.append(_tool_message(block, f"messages[{i}].content[{j}]", unsupported))
        elif isinstance(block, ToolUseBlockParam | ThinkingBlockParam | RedactedThinkingBlockParam):
            msg = f"content block type {block.type!r} is only allowed in assistant messages"
            raise InvalidRequest(msg, param=f"messages[{i}].content[{j}].type")
        elif isinstance(block, TextBlockParam):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, DocumentBlockParam):
            text = _document_part(block, f"messages[{i}].content[{j}]", unsupported)
            if text is not None:
                parts.append({"type": "text", "text": text})
        else:
            where = f"messages[{i}].content[{j}]"
            unsupported.append(UnsupportedContent(type=block.type, param=where))
    if parts or not messages:
        messages.append({"role": "user", "content": _content_of_parts(parts)})
    return messages


def _content_of_parts(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if not parts:
        return ""
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def _tool_message(
    block: ToolResultBlockParam, where: str, unsupported: list[UnsupportedContent]
) -> dict[str, Any]:
    content = ""
    if isinstance(block.content, str):
        content = block.content
    elif block.content is not None:
        texts: list[str] = []
        for k, part in enumerate(block.content):
            if isinstance(part, TextBlockParam):
                texts.append(part.text)
            elif isinstance(part, DocumentBlockParam):
                text = _document_part(part, f"{where}.content[{k}]", unsupported)
                if text is not None:
                    texts.append(text)
            else:
                found = UnsupportedContent(type=part.type, param=f"{where}.content[{k}]")
                unsupported.append(found)
        content = "".join(texts)
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": block.tool_use_id,
        "content": content,
    }
    if block.is_error:
        message["is_error"] = True
    return message
