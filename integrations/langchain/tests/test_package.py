from __future__ import annotations

from importlib.metadata import version

from packaging.requirements import Requirement

import rltap_langchain


def test_all_is_the_declared_public_api() -> None:
    assert sorted(rltap_langchain.__all__) == ["FRAMEWORK_REQUIREMENT"]


def test_installed_framework_is_in_the_declared_range() -> None:
    requirement = Requirement(rltap_langchain.FRAMEWORK_REQUIREMENT)
    assert requirement.name == "langchain-openai"
    assert requirement.specifier.contains(version(requirement.name))
