"""AReaL's `ArealOpenAI`: the direct client with AReaL 1.0.4's constructor, defaults and errors.

Usage (AReaL's direct mode, the import path changed):
    client = ArealOpenAI(engine=engine, tokenizer=tokenizer)
    completion = await client.chat.completions.create(messages=messages)
    client.set_last_reward(1.0)
    client.apply_reward_discount(turn_discount=0.9)
    interactions = client.export_interactions(style="individual")

`engine` is an AReaL engine (`agenerate` + `get_version`, wrapped in `ArealEngine`) or one of
rltap's. Calls run through `rltap.DirectOpenAI`'s session, so they are recorded exactly as the
proxy records them; the rewards follow `rltap.areal.InteractionCache` (chain discount, once).
Mistakes raise what AReaL raises: TypeError for a message that is not a dict, ValueError for a
prompt over `engine_max_tokens` or any other invalid request, KeyError for an unknown id.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any, cast

import openai
from openai.resources.chat import AsyncChat, AsyncCompletions
from openai.resources.responses import AsyncResponses
from pydantic import BaseModel

from rltap.areal.cache import InteractionCache
from rltap.areal.engine import as_rltap_engine
from rltap.areal.io_struct import to_rltap_response
from rltap.areal.streaming import areal_chunks, areal_stream_options
from rltap.areal.types import InteractionWithTokenLogpReward, as_areal
from rltap.chat.renderer import ChatRenderer, ParentTokens, RenderMode
from rltap.client.direct import RLTAP_ERROR, DirectOpenAI
from rltap.config.serve import ChatConfig, ChatTemplateMode
from rltap.record.errors import RltapError
from rltap.record.types import InteractionWithTokenLogpReward as RecordedInteraction
from rltap.session.session import Session

__all__ = ["ArealOpenAI", "concat_prompt_token_ids_with_parent"]

# AReaL's default when a call names no max_tokens / max_completion_tokens.
_DEFAULT_MAX_NEW_TOKENS = 512


@contextmanager
def _areal_errors() -> Iterator[None]:
    """The rltap error behind an SDK status error (a ValueError for a 400, ...), raised as is."""
    try:
        yield
    except openai.APIStatusError as exc:
        original = exc.response.extensions.get(RLTAP_ERROR)
        if isinstance(original, RltapError):
            raise original from None
        raise


def _message_dicts(messages: Any) -> list[dict[str, Any]]:
    """AReaL's check: any iterable (a tuple, a generator) of dicts or pydantic models (e.g. a
    reply's `message`); a string or a single dict fails on its first item, as in AReaL."""
    if not isinstance(messages, Iterable):
        msg = f"messages must be an iterable of dicts, got {type(messages).__name__}"
        raise TypeError(msg)
    dicts = []
    for index, message in enumerate(messages):
        if isinstance(message, BaseModel):
            dicts.append(message.model_dump(exclude_none=True))
        elif isinstance(message, dict):
            dicts.append(message)
        else:
            msg = f"messages[{index}] must be a dict or a BaseModel; got {type(message).__name__}"
            raise TypeError(msg)
    return dicts


def concat_prompt_token_ids_with_parent(
    message_list: list[dict[str, Any]],
    parent: RecordedInteraction | None,
    tokenizer: Any,
    tools: Iterable[Mapping[str, Any]] | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> list[int]:
    """AReaL's concat prompt: `parent`'s tokens (prompt + reply, its turn closed) followed by
    the chat template's rendering of only `message_list`, the messages added since; without a
    parent, the full rendering. rltap's concat renderer (`rltap.chat.renderer`) computes it."""
    renderer = ChatRenderer(tokenizer, mode=RenderMode.CONCAT)
    kwargs = dict((extra_body or {}).get("chat_template_kwargs") or {})
    tool_list = None if tools is None else list(tools)
    if parent is None:
        return renderer.render(message_list, tools=tool_list, template_kwargs=kwargs).input_ids
    if parent.model_response is None:
        msg = "Parent interaction has no model_response."
        raise ValueError(msg)
    response = to_rltap_response(parent.model_response)
    history = [*parent.messages, *(parent.output_message_list or [])]
    tokens = ParentTokens(
        token_ids=response.input_tokens + response.output_tokens, message_count=len(history)
    )
    messages = [*history, *message_list]
    return renderer.render(
        messages, tools=tool_list, parent=tokens, template_kwargs=kwargs
    ).input_ids


class _TemplateType:
    """`chat_template_type` of AReaL's completions and responses resources, settable after
    construction as AReaL's tests set it: one setting of the client's session for both."""

    _session: Session

    @property
    def chat_template_type(self) -> str:
        return self._session.renderer.mode.value

    @chat_template_type.setter
    def chat_template_type(self, value: str) -> None:
        modes = [mode.value for mode in RenderMode]
        if value not in modes:
            msg = f"Unsupported chat_template_type {value!r}; expected one of {modes}"
            raise ValueError(msg)
        self._session.renderer = self._session.renderer.with_mode(value)


class _Completions(_TemplateType, AsyncCompletions):
    def __init__(self, client: openai.AsyncOpenAI, session: Session) -> None:
        super().__init__(client)
        self._session = session

    async def create(self, *, messages: Any, model: str = "default", **params: Any) -> Any:
        """`chat.completions.create` with `model` optional, as AReaL's examples call it; a
        stream comes in AReaL's chunk shape (`rltap.areal.streaming`)."""
        dicts: Any = _message_dicts(messages)
        streaming = params.get("stream") is True
        if streaming:
            params["stream_options"] = areal_stream_options(params.get("stream_options"))
        with _areal_errors():
            reply = await super().create(messages=dicts, model=model, **params)
        return areal_chunks(reply) if streaming else reply


class _Chat(AsyncChat):
    def __init__(self, client: openai.AsyncOpenAI, session: Session) -> None:
        super().__init__(client)
        self._areal_completions = _Completions(client, session)

    @property
    def completions(self) -> _Completions:
        return self._areal_completions


class _Responses(_TemplateType, AsyncResponses):
    def __init__(self, client: openai.AsyncOpenAI, session: Session) -> None:
        super().__init__(client)
        self._session = session

    async def create(self, **params: Any) -> Any:
        with _areal_errors():
            return await super().create(**params)


class ArealOpenAI(DirectOpenAI):
    """AReaL 1.0.4's `ArealOpenAI(engine, tokenizer, tool_call_parser="qwen",
    reasoning_parser="qwen3", engine_max_tokens=None, chat_template_type="hf", lora_name="",
    **kwargs)`; `kwargs` go to `openai.AsyncOpenAI`."""

    def __init__(
        self,
        engine: Any,
        tokenizer: Any,
        tool_call_parser: str = "qwen",
        reasoning_parser: str = "qwen3",
        engine_max_tokens: int | None = None,
        chat_template_type: str = "hf",
        lora_name: str = "",
        **kwargs: Any,
    ) -> None:
        chat = ChatConfig(
            chat_template_mode=cast("ChatTemplateMode", chat_template_type),
            tool_parser=tool_call_parser,
            reasoning_parser=reasoning_parser,
            max_context=engine_max_tokens,
            default_max_tokens=_DEFAULT_MAX_NEW_TOKENS,
        )
        super().__init__(
            as_rltap_engine(engine, tokenizer=tokenizer, lora_name=lora_name),
            tokenizer,
            chat=chat,
            cache=InteractionCache(),
            **kwargs,
        )
        self.tokenizer = tokenizer
        self.tool_call_parser = tool_call_parser
        self.reasoning_parser = reasoning_parser
        self.lora_name = lora_name

    @cached_property
    def chat(self) -> _Chat:
        return _Chat(self, self.session)

    @cached_property
    def responses(self) -> _Responses:
        return _Responses(self, self.session)

    @property
    def chat_template_type(self) -> str:
        """ "hf" or "concat"; settable at any time (on the client, `chat.completions` or
        `responses` alike), for the calls made from then on."""
        return self.chat.completions.chat_template_type

    @chat_template_type.setter
    def chat_template_type(self, value: str) -> None:
        self.chat.completions.chat_template_type = value

    @property
    def cache(self) -> InteractionCache:
        cache = self.session.cache
        assert isinstance(cache, InteractionCache)
        return cache

    def get_interaction(self, id: str) -> InteractionWithTokenLogpReward | None:  # type: ignore[override]
        interaction = self.cache.get(id)
        return None if interaction is None else as_areal(interaction)

    def set_reward(self, id: str, reward: float) -> None:
        self.cache.set_reward(id, reward)

    def set_last_reward(self, reward: float) -> str:
        if self.cache.last_interaction_id is None:
            msg = "No interaction in cache to set reward for"
            raise RuntimeError(msg)
        return self.cache.set_last_reward(reward)

    def apply_reward_discount(  # type: ignore[override]
        self, turn_discount: float = 1.0
    ) -> dict[str, InteractionWithTokenLogpReward]:
        return self.cache.apply_reward_discount(turn_discount)

    def export_interactions(  # type: ignore[override]
        self, style: str = "individual"
    ) -> dict[str, InteractionWithTokenLogpReward]:
        return self.cache.export_interactions(style)
