"""Content parts a text model cannot take: found, taken out and reported where they were.

Images, audio, files and documents (Chat `image_url` / `input_audio` / `file`, Responses
`input_image` / `input_file` / `input_audio`, Anthropic `image` / `document` / ...) would reach
the chat template, which renders text only and drops them without a word. So each protocol takes
every part that is not text out of the canonical messages as it converts them and lists it, with
its path in the request, in `CanonicalRequest.unsupported_content`; the session then refuses the
request naming the first one (400), or, with `ChatConfig.drop_unsupported_content`
(`--drop-unsupported-content`), goes on without them.

Kept: text parts, and a `refusal` part of an echoed assistant reply (the model's own words).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rltap.protocols._validation import format_param
from rltap.record.generation import UnsupportedContent

__all__ = ["TEXT_PART_TYPES", "is_supported_part", "take_unsupported_parts"]

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
_KEPT = TEXT_PART_TYPES | {"refusal"}


def is_supported_part(part_type: Any) -> bool:
    """Whether a part of this `type` is one the model reads (text, or a refusal)."""
    return part_type in _KEPT


def take_unsupported_parts(
    messages: Sequence[dict[str, Any]], found: list[UnsupportedContent], *, root: str = "messages"
) -> None:
    """Take the parts that are not text out of `messages` (canonical, at the same indices as the
    request's `root` list), listing each in `found` with its path."""
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        kept = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if is_supported_part(kind):
                kept.append(part)
            else:
                param = format_param((root, i, "content", j)) or root
                found.append(UnsupportedContent(type=str(kind), param=param))
        if len(kept) != len(content):
            message["content"] = kept
