"""resolve_workflow: every way to name a workflow or an agent, and the errors naming the fix."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from rltap.config import EpisodeConfig, RolloutConfig
from rltap.record.errors import InvalidRequest
from rltap.rollout.workflow import (
    GroupedRolloutWorkflow,
    OpenAIProxyWorkflow,
    RolloutWorkflow,
    WorkflowError,
    WorkflowSettings,
    resolve_workflow,
)

PROXY = {"proxy_addr": "http://127.0.0.1:9", "admin_key": "admin-key"}


class LabelledWorkflow(RolloutWorkflow):
    def __init__(self, label: str = "default") -> None:
        self.label = label

    async def arun_episode(self, engine: Any, data: Any) -> None:
        return None


class AsyncAgent:
    def __init__(self, turns: int = 1) -> None:
        self.turns = turns

    async def run(self, data: Any, **kwargs: Any) -> float:
        return 1.0


class SyncAgent:
    def run(self, data: Any, **kwargs: Any) -> float:
        return 1.0


class NotAnAgent:
    pass


BROKEN_AGENT = """
raise RuntimeError("a bug in the agent file")

class Agent:
    async def run(self, data, **kwargs):
        return 1.0
"""


Resolve = Callable[..., RolloutWorkflow]


@pytest.fixture
async def resolve() -> AsyncIterator[Resolve]:
    """resolve_workflow; the proxy workflows it makes are closed at teardown."""
    made: list[RolloutWorkflow] = []

    def call(*args: Any, **kwargs: Any) -> RolloutWorkflow:
        workflow = resolve_workflow(*args, **kwargs)
        made.append(workflow)
        return workflow

    yield call
    for workflow in made:
        inner = workflow.workflow if isinstance(workflow, GroupedRolloutWorkflow) else workflow
        if isinstance(inner, OpenAIProxyWorkflow):
            await inner.aclose()


async def test_a_workflow_instance_is_used_as_is(resolve: Resolve) -> None:
    workflow = LabelledWorkflow()
    assert resolve(workflow) is workflow


async def test_a_workflow_class_is_made_with_the_workflow_kwargs(resolve: Resolve) -> None:
    workflow = resolve(LabelledWorkflow, {"label": "from kwargs"})
    assert isinstance(workflow, LabelledWorkflow)
    assert workflow.label == "from kwargs"


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param("rltap.rollout.workflow:GroupedRolloutWorkflow", id="module-colon-name"),
        pytest.param("rltap.rollout.workflow.GroupedRolloutWorkflow", id="module-dot-name"),
    ],
)
async def test_a_dotted_name_is_imported_then_resolved(resolve: Resolve, spec: str) -> None:
    inner = LabelledWorkflow()
    workflow = resolve(spec, {"workflow": inner, "group_size": 3})
    assert isinstance(workflow, GroupedRolloutWorkflow)
    assert workflow.workflow is inner
    assert workflow.group_size == 3


async def test_an_agent_file_is_loaded_and_its_agent_wrapped(
    resolve: Resolve, agent_spec: Callable[[str], str]
) -> None:
    settings = WorkflowSettings(episodes=EpisodeConfig(mode="subproc", discount=0.9))
    workflow = resolve(agent_spec("ChatAgent"), {"turns": 3}, **PROXY, settings=settings)
    assert isinstance(workflow, OpenAIProxyWorkflow)
    assert type(workflow.agent).__name__ == "ChatAgent"
    assert workflow.agent.turns == 3
    assert (workflow.proxy_addr, workflow.admin_key) == (PROXY["proxy_addr"], "admin-key")
    assert workflow.settings is settings


async def test_an_agent_class_is_made_with_the_kwargs_and_wrapped(resolve: Resolve) -> None:
    workflow = resolve(AsyncAgent, {"turns": 4}, **PROXY)
    assert isinstance(workflow, OpenAIProxyWorkflow)
    assert isinstance(workflow.agent, AsyncAgent)
    assert workflow.agent.turns == 4
    assert workflow.settings == WorkflowSettings()
    assert workflow.settings.episodes.mode == "inline"


async def test_an_agent_instance_is_wrapped_as_is(resolve: Resolve) -> None:
    agent = AsyncAgent()
    settings = WorkflowSettings(episodes=EpisodeConfig(episode_timeout=5.0), style="concat")
    workflow = resolve(agent, **PROXY, settings=settings)
    assert isinstance(workflow, OpenAIProxyWorkflow)
    assert workflow.agent is agent
    assert (workflow.style, workflow.settings.episodes.episode_timeout) == ("concat", 5.0)


async def test_a_sync_agent_is_fine_in_subprocess_mode(resolve: Resolve) -> None:
    subproc = WorkflowSettings(episodes=EpisodeConfig(mode="subproc"))
    workflow = resolve(SyncAgent, **PROXY, settings=subproc)
    assert isinstance(workflow, OpenAIProxyWorkflow)
    assert isinstance(workflow.agent, SyncAgent)


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(LabelledWorkflow(), id="workflow"),
        pytest.param(AsyncAgent(), id="agent"),
    ],
)
async def test_group_size_above_one_runs_groups(resolve: Resolve, target: Any) -> None:
    workflow = resolve(target, None, 4, **PROXY)
    assert isinstance(workflow, GroupedRolloutWorkflow)
    assert workflow.group_size == 4
    inner = workflow.workflow
    assert inner is target or (isinstance(inner, OpenAIProxyWorkflow) and inner.agent is target)


@pytest.mark.parametrize(
    ("target", "options", "message"),
    [
        pytest.param(
            SyncAgent,
            {},
            r"SyncAgent\.run is not async: .*make it `async def run\(\.\.\.\)` or use "
            r"mode='subproc'",
            id="sync-run-inline",
        ),
        pytest.param(
            "rltap.rollout.workflow:NoSuchWorkflow",
            {},
            r"module 'rltap\.rollout\.workflow' has no attribute 'NoSuchWorkflow'",
            id="missing-attribute",
        ),
        pytest.param(
            "rltap.no_such_module:Agent",
            {},
            r"cannot import 'rltap\.no_such_module' for 'rltap\.no_such_module:Agent'",
            id="bad-module-path",
        ),
        pytest.param(
            "no/such/folder/agent.py:Agent",
            {},
            r"no such file no/such/folder/agent\.py",
            id="missing-file",
        ),
        pytest.param(
            "Agent", {}, r"'Agent' is not 'pkg\.module:Name', .* or 'file\.py:Name'", id="no-module"
        ),
        pytest.param(
            NotAnAgent,
            {},
            r"NotAnAgent is neither a RolloutWorkflow nor an agent with run\(\)",
            id="class-without-run",
        ),
        pytest.param(
            "rltap.testing.scripts:echo",
            {},
            r"function is neither a RolloutWorkflow nor has run\(data\)",
            id="object-without-run",
        ),
        pytest.param(
            AsyncAgent(),
            {"proxy_addr": None},
            r"an agent needs proxy_addr and admin_key",
            id="agent-without-proxy-addr",
        ),
        pytest.param(
            AsyncAgent(),
            {"admin_key": None},
            r"an agent needs proxy_addr and admin_key",
            id="agent-without-admin-key",
        ),
        pytest.param(
            LabelledWorkflow(), {"group_size": 0}, r"group_size must be >= 1", id="group-size-0"
        ),
    ],
)
def test_what_cannot_be_resolved_is_a_clear_error(
    target: Any, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(WorkflowError, match=message):
        resolve_workflow(target, **{**PROXY, **options})


async def test_an_agent_file_fixed_after_a_failed_load_loads_again(
    resolve: Resolve, tmp_path: Path
) -> None:
    agent_file = tmp_path / "my_agent.py"
    agent_file.write_text(BROKEN_AGENT)
    with pytest.raises(RuntimeError, match="a bug in the agent file"):
        resolve(f"{agent_file}:Agent", **PROXY)
    agent_file.write_text(BROKEN_AGENT.replace("raise RuntimeError", "# raise RuntimeError"))
    workflow = resolve(f"{agent_file}:Agent", **PROXY)
    assert isinstance(workflow, OpenAIProxyWorkflow)
    assert type(workflow.agent).__name__ == "Agent"


def test_the_settings_are_rltap_rollouts_flags() -> None:
    config = RolloutConfig(
        agent="agent.py:Agent",
        data="rows.jsonl",
        out="out",
        episodes=EpisodeConfig(mode="subproc", discount=0.5, group_size=4, concurrency=2),
        style="tree",
        agents=["solver"],
        link_factors=[("handoff", 0.25)],
    )
    settings = WorkflowSettings.of(config)
    assert settings.episodes is config.episodes
    assert (settings.style, settings.agents) == ("tree", ("solver",))
    # Every link kind gets its factor: the one given, 1.0 for the others.
    assert settings.link_factors is not None
    assert settings.link_factors["handoff"] == 0.25
    assert settings.link_factors["prefix"] == 1.0
    assert settings.workers == 8  # a subprocess pool with room for every episode in flight


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        pytest.param(
            {"episodes": EpisodeConfig(mode="thread")},  # type: ignore[arg-type]
            WorkflowError,
            r"mode must be 'inline' or 'subproc', got 'thread'",
            id="unknown-mode",
        ),
        pytest.param(
            {"link_factors": {"handof": 0.5}},
            InvalidRequest,
            r"link_factors key must be one of \[.*'handoff'.*\], got 'handof'",
            id="misspelt-link-kind",
        ),
    ],
)
def test_settings_that_cannot_run_are_refused_when_made(
    settings: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        WorkflowSettings(**settings)
