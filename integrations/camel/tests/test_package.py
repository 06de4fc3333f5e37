"""The package's surface: its exports, and the framework range it refuses to run outside."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from packaging.requirements import Requirement

import rltap_camel
from rltap.adapter import FrameworkVersionError
from rltap_camel import CamelAdapter

EXPECTED_ALL = [
    "DEFAULT_CONTEXT_WINDOW",
    "FRAMEWORK_REQUIREMENT",
    "ByteTokenCounter",
    "CamelAdapter",
    "EpisodeFn",
    "ProxyModel",
    "TokenizerTokenCounter",
    "name_agents",
]


def answer(data: object, model: object) -> str:
    return "42"


def test_all_is_the_declared_public_api() -> None:
    assert sorted(EXPECTED_ALL) == sorted(rltap_camel.__all__)


def test_installed_framework_is_in_the_declared_range() -> None:
    requirement = Requirement(rltap_camel.FRAMEWORK_REQUIREMENT)
    assert requirement.name == "camel-ai"
    assert requirement.specifier.contains(version(requirement.name))
    assert CamelAdapter.requirement == rltap_camel.FRAMEWORK_REQUIREMENT
    assert CamelAdapter(answer).framework_version == version("camel-ai")


def test_an_unsupported_version_fails_at_construction_naming_both() -> None:
    class FutureCamelAdapter(CamelAdapter):
        requirement = "camel-ai>=9.0"

    installed = version("camel-ai")
    with pytest.raises(FrameworkVersionError) as caught:
        FutureCamelAdapter(answer)
    assert f"camel-ai {installed} is installed" in str(caught.value)
    assert "camel-ai>=9.0" in str(caught.value)


def test_a_missing_framework_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import PackageNotFoundError

    def not_installed(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr("rltap.adapter.version", not_installed)
    with pytest.raises(FrameworkVersionError, match="camel-ai is not installed"):
        CamelAdapter(answer)


def test_an_adapter_without_an_episode_is_refused() -> None:
    with pytest.raises(TypeError, match="pass episode=fn or override episode"):
        CamelAdapter()
