"""The standard tests every framework adapter passes (the langchain-tests pattern).

An integration's whole standard suite is a subclass naming its adapter and capabilities:

    from rltap.testing.adapter_suite import AdapterStandardTests

    class TestLangChainStandard(AdapterStandardTests):
        wire_formats = ("chat", "responses")

        def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> Any:
            return LangChainAdapter(build_tool_agent if tools else build_chain,
                                    api=wire_format, stream=stream)

`make_agent(tools=True, ...)` must give an agent that offers at least one tool to the model and
runs the tool the model calls; `tools=False` a plain chat agent. Data rows are
`{"question": str}`; the agent puts the question in its user message.

The suite checks what every adapter must do: requests reach the injected base_url with the injected
key and HTTP client; two concurrent runs stay in separate sessions; token data is recorded; a tool
call round-trips; an engine error surfaces as rltap's error type; the adapter's package imports
none of the server or ML stack through rltap (`rltap.testing.imports`: the slim install).
`test_no_overrides` fails when a subclass drops or silently overrides a standard test: every
`test_` method of
`AdapterStandardTests` (`STANDARD_TESTS`, read off the class, so a new test is guarded at once).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import httpx
import pytest

from rltap.client import OpenAIProxyClient
from rltap.record.errors import EngineError
from rltap.testing.harness import check_episode, scripted_proxy
from rltap.testing.imports import optional_imports
from rltap.testing.proxy import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX, echo

__all__ = ["STANDARD_TESTS", "AdapterStandardTests"]


class _CountingClient(httpx.AsyncClient):
    """An httpx client that counts the requests sent through it, and where they went."""

    def __init__(self) -> None:
        self.urls: list[str] = []

        async def record(request: httpx.Request) -> None:
            self.urls.append(str(request.url))

        super().__init__(timeout=120, event_hooks={"request": [record]})


async def _session(proxy: RunningProxy) -> OpenAIProxyClient:
    client = OpenAIProxyClient(proxy.url, proxy.admin_key, http_client=proxy.http)
    await client.start_session()
    return client


async def _run_and_export(
    agent: Any, proxy: RunningProxy, data: Any, http_client: Any = None
) -> tuple[Any, dict[str, Any]]:
    session = await _session(proxy)
    assert session.api_key is not None
    result = await agent.run(
        data, base_url=session.base_url, api_key=session.api_key, http_client=http_client
    )
    await session.end_session()
    return result, await session.export_interactions(discount=1.0)


class AdapterStandardTests:
    """Subclass, set the capability flags and implement `make_agent` (see the module docstring)."""

    supports_streaming: ClassVar[bool] = True
    supports_tool_calls: ClassVar[bool] = True
    wire_formats: ClassVar[tuple[str, ...]] = ("chat",)

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> Any:
        msg = f"{type(self).__name__} must implement make_agent(tools=, stream=, wire_format=)"
        raise NotImplementedError(msg)

    def _agents(self, *, tools: bool) -> list[Any]:
        streams = (False, True) if self.supports_streaming else (False,)
        return [
            self.make_agent(tools=tools, stream=stream, wire_format=wire_format)
            for wire_format in self.wire_formats
            for stream in streams
        ]

    async def test_requests_reach_the_injected_base_url_key_and_client(self) -> None:
        async with scripted_proxy(echo) as proxy:
            for agent in self._agents(tools=False):
                client = _CountingClient()
                try:
                    _, exported = await _run_and_export(
                        agent, proxy, {"question": "who are you?"}, http_client=client
                    )
                finally:
                    await client.aclose()
                assert exported, "the session recorded no call: the key did not reach the proxy"
                assert client.urls, "the injected http_client sent no request"
                assert all(url.startswith(proxy.url) for url in client.urls), client.urls

    async def test_two_concurrent_runs_stay_in_separate_sessions(self) -> None:
        agent = self._agents(tools=False)[0]
        async with scripted_proxy(echo) as proxy:
            runs = await asyncio.gather(
                _run_and_export(agent, proxy, {"question": "alpha question"}),
                _run_and_export(agent, proxy, {"question": "beta question"}),
            )
        (_, first), (_, second) = runs
        first_text = " ".join(i.output_text for i in first.values())
        second_text = " ".join(i.output_text for i in second.values())
        assert "alpha question" in first_text
        assert "beta question" not in first_text
        assert "beta question" in second_text
        assert "alpha question" not in second_text

    async def test_token_data_is_recorded(self) -> None:
        async with scripted_proxy(echo) as proxy:
            for agent in self._agents(tools=False):
                _, exported = await _run_and_export(agent, proxy, {"question": "tokens please"})
                assert exported
                for interaction in exported.values():
                    tensors = interaction.to_tensor_dict()
                    assert int(tensors["loss_mask"].sum()) > 0
                    assert bool((tensors["versions"][tensors["loss_mask"] == 1] >= 0).all())
                check_episode(
                    exported,
                    expected_interactions=len(exported),
                    expected_reward=None,
                    discount=1.0,
                )

    async def test_tool_call_round_trips(self) -> None:
        if not self.supports_tool_calls:
            pytest.skip(f"{type(self).__name__} declares supports_tool_calls = False")
        async with scripted_proxy() as proxy:
            for agent in self._agents(tools=True):
                _, exported = await _run_and_export(agent, proxy, {"question": "use the tool"})
                nodes = list(exported.values())
                assert len(nodes) == 2, [n.output_text for n in nodes]
                calls = (nodes[0].output_message_list or [{}])[0].get("tool_calls")
                assert calls, "the first reply was not a tool call"
                assert nodes[1].parent is nodes[0]
                assert nodes[1].output_text.startswith(FINAL_PREFIX)
                check_episode(exported, expected_interactions=2, expected_reward=None, discount=1.0)

    async def test_engine_error_surfaces_as_rltap_error(self) -> None:
        agent = self._agents(tools=False)[0]
        async with scripted_proxy(echo, failures={0: EngineError}) as proxy:
            session = await _session(proxy)
            assert session.api_key is not None
            with pytest.raises(EngineError):
                await agent.run(
                    {"question": "this fails"}, base_url=session.base_url, api_key=session.api_key
                )
            await session.end_session()

    def test_the_adapter_imports_without_the_server_or_the_ml_stack(self) -> None:
        package = type(self._agents(tools=False)[0]).__module__.partition(".")[0]
        assert optional_imports(package) == []

    def test_no_overrides(self) -> None:
        for name in STANDARD_TESTS:
            mine = getattr(type(self), name, None)
            assert mine is getattr(AdapterStandardTests, name), (
                f"{type(self).__name__} overrides or deletes the standard test {name}; standard "
                "tests may not be changed (set a capability flag instead)"
            )


STANDARD_TESTS: tuple[str, ...] = tuple(
    name for name in vars(AdapterStandardTests) if name.startswith("test_")
)
