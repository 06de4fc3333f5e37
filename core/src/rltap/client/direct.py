"""The direct client: an `openai.AsyncOpenAI` bound to an engine, no HTTP server in between.

`chat.completions.create` and `responses.create` (streaming too) go through an in-process
transport into the same `Session` code the proxy runs, so a call recorded here is recorded exactly
as the proxy would record it. The APIs' other routes are served the same way, from the same
declarations as the proxy's (`rltap.protocols.operation`): `responses.retrieve`,
`responses.compact`, `conversations.*` and `responses.create(conversation=...)`, the
conversations being this client's session's own. AReaL's `ArealOpenAI` (`rltap.areal`) is this
client with AReaL's constructor, defaults and reward contract.

Usage:
    chat = ChatConfig(reasoning_parser="qwen3", max_context=4096)  # `rltap serve`'s chat flags
    client = DirectOpenAI(engine=engine, tokenizer="/models/qwen", chat=chat)
    reply = await client.chat.completions.create(model="m", messages=messages)
    client.set_last_reward(1.0)
    client.apply_reward_discount(turn_discount=0.9)
    interactions = client.export_interactions(style="concat")
    pack = client.export_tree()  # the style `tree`: one TreePack (`rltap.record.pack`)
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncGenerator, AsyncIterator, Collection
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import openai
import orjson

from rltap.chat.renderer import ChatRenderer
from rltap.config.policies import Policies
from rltap.config.serve import ChatConfig
from rltap.engines.base import InferenceEngine
from rltap.protocols import SPECS, ApiSpec, operation_for, spec_for_path
from rltap.record.errors import NotFound, RltapError
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.session.exchange import JsonReply, reply
from rltap.session.json_body import parse_json
from rltap.session.session import Session
from rltap.tree.cache import InteractionCache
from rltap.tree.export import ExportStyle
from rltap.tree.links import AGENT_HEADER, agent_from_header
from rltap.tree.rewards import Aggregate, DiscountMode, LinkFactors

if TYPE_CHECKING:
    from rltap.record.pack import TreePack

__all__ = ["RLTAP_ERROR", "DirectOpenAI", "DirectTransport"]

# The error response's `extensions` key holding the RltapError it stands for, so code above the
# SDK can raise the error itself (`rltap.areal` raises AReaL's exception types this way).
RLTAP_ERROR = "rltap_error"


def _sdk_http() -> ModuleType:
    """The HTTP library the installed openai SDK speaks (httpx2 for openai 3, else httpx): the
    package of the `AsyncClient` that its public `DefaultAsyncHttpxClient` extends."""
    for base in openai.DefaultAsyncHttpxClient.__mro__[1:]:
        if base.__name__ == "AsyncClient":
            return importlib.import_module(base.__module__.partition(".")[0])
    return importlib.import_module("httpx")  # pragma: no cover - every release extends one


_http = _sdk_http()


class _Chunks(_http.AsyncByteStream):  # type: ignore[misc,name-defined]
    def __init__(self, chunks: AsyncGenerator[bytes, None]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        await self._chunks.aclose()


class DirectTransport(_http.AsyncBaseTransport):  # type: ignore[misc,name-defined]
    """Answers the SDK's requests in process: path -> protocol -> `Session` -> wire reply.

    A generation route's POST is generated (`rltap.session.exchange`); any other API route is that
    API's `Operation` (`rltap.protocols.operation`), answered as the proxy answers it.
    """

    def __init__(self, session: Session) -> None:
        self.session = session

    async def handle_async_request(self, request: Any) -> Any:
        path, method = str(request.url.path), str(request.method)
        spec = spec_for_path(path) or SPECS["chat"]
        try:
            agent = agent_from_header(request.headers.get(AGENT_HEADER))
            if method == "POST" and path.rstrip("/") in spec.paths:
                return await self._generate(request, spec, agent)
            found = operation_for(method, path)
            if found is None:
                msg = f"no route {method} {path}"
                raise NotFound(msg)
            spec, operation, params = found
            body = None
            if operation.body is not None:
                body = parse_json(await request.aread(), allow_empty=True)
            answer = await operation.run(
                self.session, params, query=request.url.params, body=body, agent=agent
            )
        except RltapError as exc:
            error = spec.error_body(exc)
            extensions = {RLTAP_ERROR: exc}
            return _http.Response(
                exc.status_code, json=error, request=request, extensions=extensions
            )
        return _json(answer, request)

    async def _generate(self, request: Any, spec: ApiSpec, agent: str | None) -> Any:
        body = spec.validate(parse_json(await request.aread()))
        canonical, after = spec.canonical_in(body, self.session)
        canonical.agent = agent
        result = await reply(self.session, canonical, after)
        if isinstance(result, JsonReply):
            return _json(result.body, request)
        headers = {"content-type": "text/event-stream"}
        return _http.Response(200, headers=headers, stream=_Chunks(result.chunks), request=request)


def _json(body: Any, request: Any) -> Any:
    headers = {"content-type": "application/json"}
    return _http.Response(200, headers=headers, content=orjson.dumps(body), request=request)


class DirectOpenAI(openai.AsyncOpenAI):
    """An `AsyncOpenAI` whose calls are generated by `engine` and recorded in one session.

    `tokenizer` is a tokenizer folder or a loaded Hugging Face tokenizer with a chat template.
    `chat` is the proxy's chat section (`rltap serve`'s chat flags: template mode, parsers,
    context, defaults, `strict_max_tokens`, `drop_unsupported_content`), so a call is rendered,
    parsed and bounded exactly as the proxy would. `cache` is the session's interaction cache
    (a fresh `InteractionCache` by default). `policies` (`ServeConfig.policies`): each call
    generates with its agent's policy, as the proxy's calls do.
    """

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: Any,
        *,
        chat: ChatConfig | None = None,
        cache: InteractionCache | None = None,
        policies: Policies | None = None,
        **openai_kwargs: Any,
    ) -> None:
        chat = chat or ChatConfig()
        mode = chat.chat_template_mode
        if isinstance(tokenizer, str | Path):
            renderer = ChatRenderer.from_pretrained(tokenizer, mode=mode)
        else:
            renderer = ChatRenderer(tokenizer, mode=mode)
        self.session = Session(engine, renderer, chat, cache=cache, policies=policies)
        transport = DirectTransport(self.session)
        openai_kwargs.setdefault("api_key", "rltap-direct")
        openai_kwargs.setdefault("base_url", "http://rltap.direct/v1")
        openai_kwargs.setdefault("max_retries", 0)
        super().__init__(http_client=_http.AsyncClient(transport=transport), **openai_kwargs)

    @property
    def engine(self) -> InferenceEngine:
        return self.session.engine

    def get_interaction(self, interaction_id: str) -> InteractionWithTokenLogpReward:
        return self.session.cache[interaction_id]

    def set_reward(self, interaction_id: str, reward: float) -> None:
        self.session.cache.set_reward(interaction_id, reward)

    def set_last_reward(self, reward: float) -> str:
        return self.session.cache.set_last_reward(reward)

    def apply_reward_discount(
        self,
        turn_discount: float = 1.0,
        aggregate: Aggregate = "mean",
        link_factors: LinkFactors | None = None,
        mode: DiscountMode = "tree",
    ) -> dict[str, float]:
        """Discounted rewards along the tree, or in insertion order (`mode="chain"`)."""
        return self.session.cache.apply_reward_discount(
            turn_discount, aggregate, mode=mode, link_factors=link_factors
        )

    def export_interactions(
        self,
        style: ExportStyle = "individual",
        reward_discount: float | None = None,
        *,
        link_factors: LinkFactors | None = None,
        agents: Collection[str] | None = None,
        mode: DiscountMode | None = None,
    ) -> dict[str, InteractionWithTokenLogpReward]:
        return self.session.cache.export_interactions(
            style, reward_discount, mode=mode, link_factors=link_factors, agents=agents
        )

    def export_tree(
        self,
        reward_discount: float | None = None,
        *,
        link_factors: LinkFactors | None = None,
        agents: Collection[str] | None = None,
        mode: DiscountMode | None = None,
    ) -> TreePack:
        """The export style `tree`: the session's interactions in one token trie."""
        return self.session.cache.export_tree(
            reward_discount, mode=mode, link_factors=link_factors, agents=agents
        )
