"""AReaL 1.0.4's documented proxy usage with only the import path changed, on a real proxy.

`OpenAIProxyWorkflow(mode=..., agent=..., proxy_addr=..., admin_api_key=..., discount=...,
export_style=...)` and `OpenAIProxyClient(session, base_url, task_id, admin_api_key)` as AReaL's
docs call them; rewards come back chain-discounted (insertion order: AReaL's numbers). The agents
live in `agents/areal_agents.py`, named by file path so subprocess workers load them too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from rltap.areal import ArealEngine, OpenAIProxyClient, OpenAIProxyWorkflow
from rltap.areal import ModelRequest as ArealModelRequest
from rltap.chat.renderer import ChatRenderer
from rltap.config import EpisodeConfig
from rltap.config.serve import ChatConfig, ServeConfig
from rltap.engines.scripted import ScriptedEngine
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.rollout.workflow import WorkflowSettings, resolve_workflow
from rltap.testing.areal_engine import ScriptedArealEngine
from rltap.testing.proxy import TEST_ADMIN_KEY, RunningProxy, start_test_proxy
from rltap.testing.scripts import echo

AGENTS_FILE = Path(__file__).parent / "agents" / "areal_agents.py"
CONFIG = ServeConfig(chat=ChatConfig(max_context=2048, default_max_tokens=32))
UNUSED_ADDR = "http://127.0.0.1:1"
QUESTION = [{"role": "user", "content": "what is 2 + 2?"}]


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inline agents reach the proxy only through what the workflow passes them."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
async def proxy(tiny_model: Any, renderer: ChatRenderer) -> AsyncIterator[RunningProxy]:
    """The echo script: `Turn N: you said: <last user message>`."""
    engine = ScriptedEngine(echo, tiny_model, tokenizer=renderer.tokenizer)
    async with start_test_proxy(engine, renderer, CONFIG) as running:
        yield running
    await engine.close()


@pytest.fixture
async def load_agent() -> AsyncIterator[Callable[[str], Any]]:
    """An agent of `agents/areal_agents.py`, loaded by file path as `rltap rollout` loads it
    (`resolve_workflow` is that loader; only its agent is kept, its workflow never runs)."""
    loaders = []

    def load(name: str) -> Any:
        loader = resolve_workflow(
            f"{AGENTS_FILE}:{name}",
            proxy_addr=UNUSED_ADDR,
            admin_key=TEST_ADMIN_KEY,
            settings=WorkflowSettings(episodes=EpisodeConfig(mode="subproc")),
        )
        loaders.append(loader)
        return getattr(loader, "agent")  # noqa: B009  # RolloutWorkflow names no agent

    yield load
    for loader in loaders:
        await getattr(loader, "aclose")()  # noqa: B009


def in_order(interactions: dict[str, InteractionWithTokenLogpReward]) -> list[Any]:
    assert all(node.interaction_id == key for key, node in interactions.items())
    return list(interactions.values())


async def test_inline_agent_episode_is_chain_discounted(
    proxy: RunningProxy, load_agent: Callable[[str], Any]
) -> None:
    workflow = OpenAIProxyWorkflow(
        mode="inline",
        agent=load_agent("TwoTurnAgent"),
        proxy_addr=proxy.url,
        admin_api_key=proxy.admin_key,
        discount=0.9,
        export_style="individual",
    )
    # AReaL's trainer passes its own engine; the proxy's engine generates, so any value does.
    interactions = await workflow.arun_episode(None, {"messages": QUESTION})
    await workflow.aclose()

    assert interactions is not None
    first, second = in_order(interactions)
    assert first.messages == QUESTION
    assert first.output_text == "Turn 0: you said: what is 2 + 2?"
    assert second.messages[-1] == {"role": "user", "content": "and again?"}
    assert second.output_text == "Turn 1: you said: and again?"
    assert second.parent_id == first.interaction_id
    # The agent returned 1.0: the last reply keeps it, the one before gets 0.9 x 1.0.
    assert [first.reward, second.reward] == pytest.approx([0.9, 1.0])
    assert workflow.failures == 0


async def test_subproc_agent_uses_the_sync_client_from_the_environment(
    proxy: RunningProxy, load_agent: Callable[[str], Any]
) -> None:
    workflow = OpenAIProxyWorkflow(
        mode="subproc",
        agent=load_agent("SyncClientAgent"),
        proxy_addr=proxy.url,
        admin_api_key=proxy.admin_key,
        discount=0.5,
        subproc_max_workers=4,
    )
    data = {"questions": ["first?", "second?"]}
    interactions = await workflow.arun_episode(None, data)
    await workflow.aclose()

    assert interactions is not None
    first, second = in_order(interactions)
    assert [first.output_text, second.output_text] == [
        "Turn 0: you said: first?",
        "Turn 0: you said: second?",
    ]
    # Two separate conversations: insertion order still discounts the first (AReaL's numbers).
    assert (first.parent_id, second.parent_id) == (None, None)
    assert [first.reward, second.reward] == pytest.approx([0.5, 1.0])
    assert workflow.subproc_max_workers == 4


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        pytest.param({"mode": "remote"}, ValueError, "Invalid mode: remote", id="bad-mode"),
        pytest.param(
            {"mode": "online", "proxy_gateway_addr": UNUSED_ADDR},
            ValueError,
            "proxy gateway",
            id="online-needs-arealss-gateway",
        ),
        pytest.param({"mode": "inline", "agent": None}, ValueError, "agent is required", id="none"),
        pytest.param({"mode": "inline", "agent": "SyncRunAgent"}, TypeError, "async", id="sync"),
        pytest.param(
            {"mode": "subproc", "agent": "SyncRunAgent"}, TypeError, "async", id="sync-subproc"
        ),
        pytest.param(
            {"mode": "inline", "proxy_addr": ""}, ValueError, "proxy_addr", id="no-proxy-addr"
        ),
    ],
)
def test_constructor_refuses_what_areal_refuses(
    load_agent: Callable[[str], Any], options: dict[str, Any], error: type, message: str
) -> None:
    options = {"agent": "TwoTurnAgent", "proxy_addr": UNUSED_ADDR, **options}
    if options["agent"] is not None:
        options["agent"] = load_agent(options["agent"])
    with pytest.raises(error, match=message):
        OpenAIProxyWorkflow(**options)


async def test_areal_style_client_session(proxy: RunningProxy) -> None:
    async with aiohttp.ClientSession() as http:
        client = OpenAIProxyClient(
            session=http, base_url=proxy.url, task_id="t", admin_api_key=proxy.admin_key
        )
        with pytest.raises(ValueError, match="Session API key is not set"):
            _ = client.session_api_key
        async with client:
            agent = openai.AsyncOpenAI(
                base_url=client.base_url, api_key=client.session_api_key, max_retries=0
            )
            for question in ("one?", "two?"):
                messages: Any = [{"role": "user", "content": question}]
                await agent.chat.completions.create(model="default", messages=messages)
            await client.set_last_reward(1.0)
            await agent.close()
        interactions = await client.export_interactions(discount=0.5)

    first, second = in_order(interactions)
    assert [first.output_text, second.output_text] == [
        "Turn 0: you said: one?",
        "Turn 0: you said: two?",
    ]
    # Along the tree the first conversation would get nothing; AReaL's order gives it 0.5.
    assert [first.reward, second.reward] == pytest.approx([0.5, 1.0])


async def test_an_areal_engine_behind_the_proxy(renderer: ChatRenderer) -> None:
    tokenizer = renderer.tokenizer
    areal_engine = ScriptedArealEngine(tokenizer, ["4"], version=3)
    engine = ArealEngine(areal_engine, tokenizer=tokenizer)
    async with (
        start_test_proxy(engine, renderer, CONFIG) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = OpenAIProxyClient(http, proxy.url, "t", proxy.admin_key)
        async with client:
            agent = openai.AsyncOpenAI(
                base_url=client.base_url, api_key=client.session_api_key, max_retries=0
            )
            completion = await agent.chat.completions.create(
                model="default", messages=QUESTION, max_tokens=8, temperature=0.5
            )
            await client.set_last_reward(1.0)
            await agent.close()
        interactions = await client.export_interactions()

    assert completion.choices[0].message.content == "4"
    (request,) = areal_engine.requests
    assert isinstance(request, ArealModelRequest)
    assert (request.gconfig.max_new_tokens, request.gconfig.temperature) == (8, 0.5)
    assert request.tokenizer is tokenizer
    (interaction,) = interactions.values()
    response = interaction.model_response
    assert response is not None
    assert response.input_tokens == request.input_ids
    assert response.output_tokens == [*tokenizer.encode("4"), tokenizer.eos_token_id]
    assert response.output_logprobs == pytest.approx([-1 / 2, -1 / 3])
    assert response.output_versions == [3, 3]
