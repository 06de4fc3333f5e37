"""The adapter run by rltap's `OpenAIProxyWorkflow`: chain and agent episodes side by side.

Inline mode awaits `adapter.run(data, base_url=..., api_key=..., http_client=...)`. Subprocess
mode (the adapter pickled into a spawned worker that reads OPENAI_BASE_URL / OPENAI_API_KEY) is
covered by test_matrix.py's subproc cells, which share one worker: spawning one costs ~10 s here.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lc_builders import QUESTION, build_by_kind, exact_match, input_by_kind

from rltap.adapter import Api
from rltap.config import EpisodeConfig
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing import RunningProxy
from rltap_langchain import LangChainAdapter

CHAIN_ROW = {"kind": "chain", "question": QUESTION}
AGENT_ROW = {"kind": "agent", "question": QUESTION}
DISCOUNT = 0.5


def _adapter(api: Api, stream: bool) -> LangChainAdapter:
    return LangChainAdapter(
        build_by_kind,
        api=api,
        stream=stream,
        input_fn=input_by_kind,
        reward_fn=exact_match,
    )


def _check_agent_episode(interactions: dict[str, Any]) -> None:
    """Concat export of the tool loop: one sequence for the leaf, both replies in its loss mask."""
    (leaf,) = interactions.values()
    assert leaf.reward == 1.0  # the final reply's own reward, not discounted
    tensors = leaf.to_tensor_dict()
    mask = tensors["loss_mask"][0].tolist()
    segments = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
    assert segments == 2
    versions = tensors["versions"][0].tolist()
    assert all((v >= 0) == bool(m) for v, m in zip(versions, mask, strict=True))


def _check_chain_episode(interactions: dict[str, Any]) -> None:
    (only,) = interactions.values()
    assert only.reward == 1.0
    assert only.parent is None


@pytest.mark.parametrize(
    ("api", "stream"),
    [
        pytest.param("chat", False, id="chat-json"),
        pytest.param("responses", True, id="responses-sse"),
    ],
)
async def test_workflow_runs_chain_and_agent_episodes(
    proxy: RunningProxy, api: Api, stream: bool
) -> None:
    workflow = OpenAIProxyWorkflow(
        _adapter(api, stream),
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=WorkflowSettings(
            episodes=EpisodeConfig(mode="inline", discount=DISCOUNT, episode_timeout=120),
            style="concat",
        ),
    )
    try:
        chain, agent = await asyncio.gather(
            workflow.run_episode(CHAIN_ROW), workflow.run_episode(AGENT_ROW)
        )
    finally:
        await workflow.aclose()
    assert (chain.error, agent.error) == (None, None)
    assert workflow.failures == 0
    assert chain.session_id != agent.session_id
    assert chain.interactions is not None
    assert agent.interactions is not None
    _check_chain_episode(chain.interactions)
    _check_agent_episode(agent.interactions)
