"""The package's surface: its exports, and the framework range it declares and checks."""

from __future__ import annotations

import pickle
from importlib.metadata import requires, version
from typing import Any, ClassVar

import pytest
from agents import ModelSettings
from oa_agents_for_tests import build_calculator, exact_match, run_it_myself
from packaging.requirements import Requirement

import rltap_openai_agents
from rltap.adapter import FrameworkVersionError
from rltap_openai_agents import OpenAIAgentsAdapter, default_input

EXPECTED_ALL = [
    "FRAMEWORK_REQUIREMENT",
    "AgentFactory",
    "EpisodeFn",
    "OpenAIAgentsAdapter",
    "ProxyModelProvider",
    "default_input",
    "proxy_client",
    "proxy_model",
    "proxy_run_config",
]


def test_all_is_the_declared_public_api() -> None:
    assert sorted(EXPECTED_ALL) == sorted(rltap_openai_agents.__all__)


def test_installed_framework_is_in_the_declared_range() -> None:
    requirement = Requirement(rltap_openai_agents.FRAMEWORK_REQUIREMENT)
    assert requirement.name == "openai-agents"
    assert requirement.specifier.contains(version(requirement.name))
    assert OpenAIAgentsAdapter.requirement == rltap_openai_agents.FRAMEWORK_REQUIREMENT


def test_distribution_metadata_declares_the_same_range() -> None:
    declared = [Requirement(line) for line in requires("rltap-openai-agents") or []]
    framework = [r for r in declared if r.name == "openai-agents"]
    assert [str(r.specifier) for r in framework] == [
        str(Requirement(rltap_openai_agents.FRAMEWORK_REQUIREMENT).specifier)
    ]


def test_construction_fails_outside_the_supported_range() -> None:
    class FromTheFuture(OpenAIAgentsAdapter):
        requirement: ClassVar[str] = "openai-agents>=99"

    installed = version("openai-agents")
    with pytest.raises(FrameworkVersionError) as caught:
        FromTheFuture(build_calculator)
    assert f"openai-agents {installed} is installed" in str(caught.value)
    assert "openai-agents>=99" in str(caught.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({}, "exactly one of agent", id="neither"),
        pytest.param(
            {"agent": build_calculator, "episode": run_it_myself}, "exactly one", id="both"
        ),
        pytest.param({"agent": build_calculator, "api": "completions"}, "api must", id="api"),
    ],
)
def test_constructor_rejects_what_it_cannot_run(options: dict[str, Any], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        OpenAIAgentsAdapter(**options)


def test_adapter_with_module_level_parts_pickles_for_subprocess_mode() -> None:
    adapter = OpenAIAgentsAdapter(
        build_calculator,
        api="responses",
        stream=True,
        reward_fn=exact_match,
        model_settings=ModelSettings(temperature=0.7),
    )
    copy = pickle.loads(pickle.dumps(adapter))
    assert (copy.agent, copy.api, copy.stream, copy.reward_fn) == (
        build_calculator,
        "responses",
        True,
        exact_match,
    )
    assert copy.model_settings == ModelSettings(temperature=0.7)


def test_adapter_holding_an_agent_instance_says_how_to_pickle() -> None:
    adapter = OpenAIAgentsAdapter(build_calculator({}))
    with pytest.raises(TypeError, match="module-level function that builds the Agent"):
        pickle.dumps(adapter)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        pytest.param("2+3?", "2+3?", id="string"),
        pytest.param({"question": "2+3?", "answer": "5"}, "2+3?", id="question"),
        pytest.param({"prompt": "hi", "input": "first"}, "first", id="input-wins"),
        pytest.param(
            {"messages": [{"role": "user", "content": "hi"}]},
            [{"role": "user", "content": "hi"}],
            id="messages",
        ),
    ],
)
def test_default_input_reads_the_usual_fields(row: Any, expected: Any) -> None:
    assert default_input(row) == expected


@pytest.mark.parametrize(
    "row", [pytest.param({"answer": "5"}, id="no-field"), pytest.param(42, id="number")]
)
def test_default_input_names_the_fix(row: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="input_fn"):
        default_input(row)
