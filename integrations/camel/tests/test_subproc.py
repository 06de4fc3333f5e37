"""The adapter in subprocess mode: pickled into a spawned worker, connected through OPENAI_*."""

from __future__ import annotations

from camel_episodes import EXPECTED, ScenarioAdapter
from test_role_playing import TASK, check_role_play

from rltap.config import EpisodeConfig
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing import RunningProxy
from rltap_dev.matrix import shared_agent_pool


async def test_episodes_run_in_a_worker_process(proxy: RunningProxy) -> None:
    # The matrix's one-worker pool: spawning a worker (and importing CAMEL there) is the slow
    # part, so the whole run spawns one.
    workflow = OpenAIProxyWorkflow(
        ScenarioAdapter(),
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=WorkflowSettings(episodes=EpisodeConfig(mode="subproc", discount=0.5)),
        agent_pool=shared_agent_pool(),
    )
    try:
        role_play = await workflow.run_episode({"episode": "role_play", **TASK})
        chat = await workflow.run_episode({"episode": "chat_astep", "question": "2 + 2?"})
    finally:
        await workflow.aclose()
    assert role_play.error is None
    assert role_play.interactions is not None
    check_role_play(role_play.interactions)
    assert chat.error is None
    assert chat.interactions is not None
    call, answer = chat.interactions.values()
    assert answer.parent_id == call.interaction_id
    assert (answer.output_text, answer.reward, call.reward) == (EXPECTED, 1.0, 0.5)
