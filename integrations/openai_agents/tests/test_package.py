from __future__ import annotations

from importlib.metadata import version

from packaging.requirements import Requirement

import rltap_openai_agents


def test_all_is_the_declared_public_api() -> None:
    assert sorted(rltap_openai_agents.__all__) == ["FRAMEWORK_REQUIREMENT"]


def test_installed_framework_is_in_the_declared_range() -> None:
    requirement = Requirement(rltap_openai_agents.FRAMEWORK_REQUIREMENT)
    assert requirement.name == "openai-agents"
    assert requirement.specifier.contains(version(requirement.name))
