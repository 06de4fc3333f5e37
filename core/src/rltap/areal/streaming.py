"""AReaL 1.0.4's chunk shape for a streamed chat completion, made from rltap's OpenAI stream.

rltap streams as OpenAI does: usage only in an extra chunk when `stream_options.include_usage`
asks for it, and a tool call spread over deltas of which only the first names it. AReaL's
`ArealOpenAI` yields instead: a role chunk (`content=""`), the text, one chunk per tool call
carrying its `id`, `type`, `name` and whole `arguments`, then the chunk with `finish_reason`,
which also carries `usage`. `areal_chunks` turns the first into the second; the text still
arrives as the engine produces it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from openai import AsyncStream
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import (
    Choice,
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
)

__all__ = ["areal_chunks", "areal_stream_options"]


@dataclass
class _ToolCall:
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def add(self, delta: ChoiceDeltaToolCall) -> None:
        self.id = self.id or delta.id
        if delta.function is not None:
            self.name = self.name or delta.function.name
            self.arguments += delta.function.arguments or ""

    def delta(self, index: int) -> ChoiceDeltaToolCall:
        function = ChoiceDeltaToolCallFunction(name=self.name, arguments=self.arguments)
        return ChoiceDeltaToolCall(index=index, id=self.id, type="function", function=function)


def areal_stream_options(options: Any) -> dict[str, Any]:
    """The caller's `stream_options` with usage asked for: AReaL's last chunk always has it."""
    return {**dict(options or {}), "include_usage": True}


def _with_choice(chunk: ChatCompletionChunk, choice: Choice, **update: Any) -> ChatCompletionChunk:
    return chunk.model_copy(update={"choices": [choice], **update})


async def areal_chunks(
    stream: AsyncStream[ChatCompletionChunk],
) -> AsyncGenerator[ChatCompletionChunk, None]:
    """`stream` (asked with `areal_stream_options`) in AReaL's shape; closing the generator
    closes `stream`, which cancels the generation."""
    calls: dict[int, _ToolCall] = {}
    finish: ChatCompletionChunk | None = None
    try:
        async for chunk in stream:
            if len(chunk.choices) != 1:
                if finish is not None and chunk.usage is not None:  # include_usage's own chunk
                    yield finish.model_copy(update={"usage": chunk.usage})
                    finish = None
                elif chunk.choices:
                    yield chunk  # several choices: AReaL refuses n != 1, rltap's shape stays
                continue
            choice = chunk.choices[0]
            for call in choice.delta.tool_calls or []:
                calls.setdefault(call.index, _ToolCall()).add(call)
            rest = choice.delta.model_copy(update={"tool_calls": None})
            if rest.role is not None and rest.content is None:
                rest.content = ""
            if choice.finish_reason is not None:
                for index in sorted(calls):
                    delta = ChoiceDelta(tool_calls=[calls[index].delta(index)])
                    yield _with_choice(chunk, Choice(index=0, delta=delta), usage=None)
                calls.clear()
                finish = _with_choice(chunk, choice.model_copy(update={"delta": rest}))
                if chunk.usage is not None:
                    yield finish
                    finish = None
            elif rest.model_dump(exclude_none=True):
                yield _with_choice(chunk, choice.model_copy(update={"delta": rest}))
        if finish is not None:
            yield finish
    finally:
        await stream.close()
