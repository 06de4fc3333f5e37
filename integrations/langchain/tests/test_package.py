"""The public surface and the declared framework ranges."""

from __future__ import annotations

from importlib.metadata import requires, version

import pytest
from lc_builders import build_chain
from packaging.requirements import Requirement

import rltap_langchain
from rltap.adapter import FrameworkVersionError
from rltap_langchain import LangChainAdapter

EXPECTED_ALL = [
    "FRAMEWORK_REQUIREMENT",
    "LANGCHAIN_REQUIREMENT",
    "Build",
    "LangChainAdapter",
    "final_text",
]


def test_all_is_the_declared_public_api() -> None:
    assert sorted(EXPECTED_ALL) == sorted(rltap_langchain.__all__)
    for name in rltap_langchain.__all__:
        assert getattr(rltap_langchain, name) is not None


@pytest.mark.parametrize(
    ("requirement", "name"),
    [
        pytest.param(rltap_langchain.FRAMEWORK_REQUIREMENT, "langchain-openai", id="openai"),
        pytest.param(rltap_langchain.LANGCHAIN_REQUIREMENT, "langchain", id="langchain"),
    ],
)
def test_installed_framework_is_in_the_declared_range(requirement: str, name: str) -> None:
    wanted = Requirement(requirement)
    assert wanted.name == name
    assert wanted.specifier.contains(version(name))
    # pyproject.toml declares the same range (the single source is _requirements.py).
    declared = [Requirement(line) for line in requires("rltap-langchain") or []]
    assert wanted in declared


def test_adapter_records_the_installed_versions() -> None:
    adapter = LangChainAdapter(build_chain)
    assert adapter.requirement == rltap_langchain.FRAMEWORK_REQUIREMENT
    assert adapter.framework_version == version("langchain-openai")
    assert adapter.langchain_version == version("langchain")


class _FutureOpenAIAdapter(LangChainAdapter):
    requirement = "langchain-openai>=99"


class _FutureLangChainAdapter(LangChainAdapter):
    langchain_requirement = "langchain>=99"


@pytest.mark.parametrize(
    ("adapter_class", "name"),
    [
        pytest.param(_FutureOpenAIAdapter, "langchain-openai", id="langchain-openai"),
        pytest.param(_FutureLangChainAdapter, "langchain", id="langchain"),
    ],
)
def test_unsupported_version_fails_at_construction(
    adapter_class: type[LangChainAdapter], name: str
) -> None:
    with pytest.raises(FrameworkVersionError) as caught:
        adapter_class(build_chain)
    message = str(caught.value)
    assert f"{name} {version(name)} is installed" in message
    assert f"{name}>=99" in message


def test_build_must_be_callable() -> None:
    with pytest.raises(TypeError, match="build must be a callable"):
        LangChainAdapter("prompt | llm")  # type: ignore[arg-type]


def test_api_must_name_a_wire_format() -> None:
    with pytest.raises(ValueError, match="api must be one of chat, responses, got 'completions'"):
        LangChainAdapter(build_chain, api="completions")  # type: ignore[arg-type]
