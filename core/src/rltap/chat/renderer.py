"""Messages to prompt token ids with a Hugging Face chat template, and output ids back to text.

Two modes (the seed's `chat_template_type`):

- `hf`: every call renders the whole conversation with the chat template and tokenizes it.
- `concat` (token-in, token-out): a call that continues a parent interaction reuses the parent's
  exact tokens (its prompt + its output, stop token included) and appends the tokens of only the
  messages added since. What the model actually produced is never re-tokenized, so the prompt
  of a child always starts with its parent's full sequence.

How the new messages are found in the template's output: the parent covers the first
`message_count` messages. Only a window is rendered (the leading system message, the last covered
message and the new ones), so a call costs the same at turn 64 as at turn 1. Rendering the covered
part of the window alone (no generation prompt) contains k end-of-turn
markers (`<|im_end|>` for ChatML). The new part is everything in the full rendering after its
k-th marker, e.g. `\\n<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n`. The newline
after `<|im_end|>` belongs to the new part: the model stops at `<|im_end|>` and never generates it.
Markers are special tokens, so tokenizing the new part alone gives the same ids as tokenizing it
inside the full text. A template whose rendering has fewer markers than that falls back to a
full rendering (`RenderedPrompt.reused_len == 0`).

A parent that stopped without its end-of-turn token (`max_tokens` reached, a stop string, an
abort) left its turn open. Its turn is closed by appending the end-of-turn ids as prompt tokens
of the child (`RenderedPrompt.closing_len` of them, never trained on), so the child's sequence
has the template's structure: `...truncated output<|im_end|>\\n<|im_start|>user\\n...`. This is
also what the hf rendering of the truncated assistant message gives.

Usage:
    renderer = ChatRenderer(tokenizer, mode="concat")
    first = renderer.render(messages)
    child = renderer.render(messages + [reply, next_user], parent=interaction)
"""

from __future__ import annotations

import enum
import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from cachetools import LRUCache
from jinja2 import TemplateError

from rltap.chat.concat_window import end_of_nth, head_shape, render_window
from rltap.chat.piece_encoder import PieceEncoder
from rltap.chat.stream_decoder import StreamDecoder
from rltap.chat.template_render import CompiledChatTemplate
from rltap.record.errors import InvalidRequest
from rltap.record.types import InteractionWithTokenLogpReward

__all__ = ["ChatRenderer", "ParentTokens", "RenderMode", "RenderedPrompt", "StreamDecoder"]


class RenderMode(enum.StrEnum):
    HF = "hf"  # full chat-template rendering on every call
    CONCAT = "concat"  # parent tokens + rendering of the new messages (token-in, token-out)


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentTokens:
    """What a child call continues: the parent's full token sequence and the messages it covers.

    `token_ids` is the parent's prompt followed by its output (stop token included when it
    stopped on one); `message_count` is how many leading messages of the child's request those
    tokens stand for (the parent's request messages + its output messages).
    """

    token_ids: Sequence[int]
    message_count: int

    @classmethod
    def of(cls, interaction: InteractionWithTokenLogpReward) -> ParentTokens:
        """The tokens and message count of a completed interaction."""
        response = interaction.model_response
        if response is None:
            msg = f"interaction {interaction.interaction_id} has no model response to continue"
            raise ValueError(msg)
        count = len(interaction.messages) + len(interaction.output_message_list or [])
        return cls(token_ids=[*response.input_tokens, *response.output_tokens], message_count=count)


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderedPrompt:
    """Prompt ids for the engine, and where they came from.

    `reused_len` leading ids were copied verbatim from the parent (0: full rendering);
    `closing_len` end-of-turn ids follow them when the parent's turn was left open.
    """

    input_ids: list[int]
    reused_len: int = 0
    closing_len: int = 0


class ChatRenderer:
    """Renders canonical chat messages (+ tools) into prompt ids with a tokenizer's chat template.

    `tokenizer` is a Hugging Face tokenizer with a chat template (or pass `chat_template`).
    `end_of_turn` is the text that closes an assistant turn (default: the tokenizer's eos
    token, `<|im_end|>` for Qwen). `extra_stop_token_ids` are further ids generation stops
    on (e.g. the `eos_token_id` list of a model's generation_config.json).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        mode: RenderMode | str = RenderMode.CONCAT,
        chat_template: str | None = None,
        end_of_turn: str | None = None,
        extra_stop_token_ids: Iterable[int] = (),
    ) -> None:
        self._tokenizer = tokenizer
        self._mode = RenderMode(mode)
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            msg = "the tokenizer has no chat template; pass chat_template="
            raise ValueError(msg)
        self._template = CompiledChatTemplate(tokenizer, chat_template)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend = backend if callable(getattr(backend, "encode", None)) else None
        self._pieces = PieceEncoder.for_backend(backend) if self._backend is not None else None
        self._head_turns_by_shape: LRUCache[tuple[Any, ...], int] = LRUCache(maxsize=4096)
        self._head_turns_lock = threading.Lock()  # cachetools' caches are not thread-safe
        # The Rust decoder gives transformers' text unless transformers cleans up spaces after it.
        plain = self._backend is not None and not getattr(
            tokenizer, "clean_up_tokenization_spaces", False
        )
        self._decoder: Any = self._backend if plain else tokenizer
        self._end_of_turn = end_of_turn if end_of_turn is not None else str(tokenizer.eos_token)
        self._end_of_turn_ids = tuple(self._encode(self._end_of_turn))
        if not self._end_of_turn_ids:
            msg = f"end-of-turn text {self._end_of_turn!r} encodes to no tokens"
            raise ValueError(msg)
        stops = [self._end_of_turn_ids[-1]]
        if tokenizer.eos_token_id is not None:
            stops.append(int(tokenizer.eos_token_id))
        stops.extend(int(i) for i in extra_stop_token_ids)
        self._stop_token_ids = tuple(dict.fromkeys(stops))

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        mode: RenderMode | str = RenderMode.CONCAT,
        tokenizer: Any = None,
    ) -> ChatRenderer:
        """Load the tokenizer at `path` (or use `tokenizer`, that one already loaded: a 150k
        vocabulary holds ~85 MB a copy); eos ids of a generation_config.json there become stops."""
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(path))
        return cls(tokenizer, mode=mode, extra_stop_token_ids=_generation_eos_ids(Path(path)))

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def mode(self) -> RenderMode:
        return self._mode

    def with_mode(self, mode: RenderMode | str) -> ChatRenderer:
        """This renderer in another mode, sharing its (mode-free) compiled template and caches."""
        renderer = object.__new__(type(self))
        vars(renderer).update(vars(self), _mode=RenderMode(mode))
        return renderer

    @property
    def end_of_turn_ids(self) -> tuple[int, ...]:
        """The ids that close an assistant turn (`<|im_end|>` -> (151645,) for Qwen)."""
        return self._end_of_turn_ids

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The ids generation should stop on: end of turn first, then eos and extra stops."""
        return self._stop_token_ids

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        parent: InteractionWithTokenLogpReward | ParentTokens | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> RenderedPrompt:
        """Prompt ids for `messages`; in concat mode, continuing `parent` token for token.

        `template_kwargs` reach the template (e.g. `{"enable_thinking": False}`). In hf mode,
        or without a parent, this is the full chat-template rendering.
        """
        if self._mode is RenderMode.HF or parent is None:
            return RenderedPrompt(
                input_ids=self.render_full(
                    messages,
                    tools=tools,
                    add_generation_prompt=add_generation_prompt,
                    template_kwargs=template_kwargs,
                )
            )
        prefix = parent if isinstance(parent, ParentTokens) else ParentTokens.of(parent)
        delta = self._new_messages_text(
            messages, prefix.message_count, tools, add_generation_prompt, template_kwargs
        )
        if delta is None:
            return self.render(
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                template_kwargs=template_kwargs,
            )
        closing = [] if self.ends_turn(prefix.token_ids) else list(self._end_of_turn_ids)
        # The parent's ids are the bulk of a long conversation's prompt: copied once, here (a
        # ParentTokens built just above holds a fresh list already, extended in place).
        fresh = prefix is not parent
        ids = cast(list[int], prefix.token_ids) if fresh else list(prefix.token_ids)
        reused_len = len(ids)
        ids += closing
        ids += self._encode(delta)
        return RenderedPrompt(input_ids=ids, reused_len=reused_len, closing_len=len(closing))

    def render_full(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """The chat template's rendering of the whole conversation, tokenized (hf mode)."""
        text = self.render_text(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            template_kwargs=template_kwargs,
        )
        return self._encode(text)

    def render_text(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """The chat template's text for the conversation."""
        try:
            return self._template.render(
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                template_kwargs=template_kwargs,
            )
        except TemplateError as exc:
            msg = f"the chat template rejected the messages: {exc}"
            raise InvalidRequest(msg, param="messages") from exc

    def ends_turn(self, token_ids: Sequence[int]) -> bool:
        """Whether `token_ids` end with the end-of-turn ids (the model closed its turn)."""
        n = len(self._end_of_turn_ids)
        return len(token_ids) >= n and tuple(token_ids[-n:]) == self._end_of_turn_ids

    def strip_stop(self, output_ids: Sequence[int]) -> list[int]:
        """`output_ids` without one trailing stop token, if they end with one."""
        if output_ids and output_ids[-1] in self._stop_token_ids:
            return list(output_ids[:-1])
        return list(output_ids)

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Ids to text. Qwen's tool and think tags are not "special": they survive skipping."""
        return str(self._decoder.decode(list(token_ids), skip_special_tokens=skip_special_tokens))

    def output_text(self, output_ids: Sequence[int]) -> str:
        """The text of a generated reply: trailing stop token dropped, every other tag kept."""
        return self.decode(self.strip_stop(output_ids))

    def stream_decoder(self) -> StreamDecoder:
        """A decoder for ids that arrive a few at a time (see `StreamDecoder`)."""
        return StreamDecoder(self._decoder)

    def _encode(self, text: str) -> list[int]:
        if self._pieces is not None:  # the Rust tokenizer, with repeated pieces cached
            return self._pieces.encode(text)
        if self._backend is not None:  # the Rust tokenizer itself: same ids, less overhead
            return list(self._backend.encode(text, add_special_tokens=False).ids)
        return [int(i) for i in self._tokenizer.encode(text, add_special_tokens=False)]

    def _new_messages_text(
        self,
        messages: Sequence[Mapping[str, Any]],
        covered: int,
        tools: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        template_kwargs: Mapping[str, Any] | None,
    ) -> str | None:
        if not 0 < covered <= len(messages):
            msg = (
                f"the parent covers {covered} messages but the request has {len(messages)}: "
                "it does not continue the parent"
            )
            raise InvalidRequest(msg, param="messages")
        messages, covered = render_window(messages, covered)
        full = self.render_text(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            template_kwargs=template_kwargs,
        )
        turns = self._head_turns(messages[:covered], tools, template_kwargs)
        cut = end_of_nth(full, self._end_of_turn, turns)
        return None if cut is None else full[cut:]

    def _head_turns(
        self,
        head: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        template_kwargs: Mapping[str, Any] | None,
    ) -> int:
        """How many end-of-turn markers the rendering of `head` alone contains.

        The count depends on the head's shape (roles, tool calls, reasoning, kind of content),
        not on its text, unless the text itself contains the marker: it is remembered per shape,
        which saves one of the two template renderings of a concat call.
        """
        shape = head_shape(head, tools, template_kwargs, self._end_of_turn)
        if shape is not None:
            with self._head_turns_lock:
                turns = self._head_turns_by_shape.get(shape)
            if turns is not None:
                return turns
        text = self.render_text(
            head, tools=tools, add_generation_prompt=False, template_kwargs=template_kwargs
        )
        turns = text.count(self._end_of_turn)
        if shape is not None:
            with self._head_turns_lock:
                self._head_turns_by_shape[shape] = turns
        return turns


def _generation_eos_ids(path: Path) -> list[int]:
    config = path / "generation_config.json"
    if not config.is_file():
        return []
    eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token_id")
    if eos is None:
        return []
    return [int(i) for i in (eos if isinstance(eos, list) else [eos])]
