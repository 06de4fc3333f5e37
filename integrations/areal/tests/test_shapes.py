"""`rltap.areal` has AReaL 1.0.4's names, dataclass fields, defaults and signatures."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import areal.experimental.openai as areal_openai
import pytest
from areal.api import cli_args, io_struct
from areal.experimental.openai.cache import InteractionCache
from areal.experimental.openai.proxy.client_session import OpenAIProxyClient
from areal.experimental.openai.proxy.workflow import OpenAIProxyWorkflow

import rltap.areal
from rltap.areal import io_struct as rltap_io_struct


def test_areals_public_names_are_all_there() -> None:
    assert set(areal_openai.__all__) <= set(rltap.areal.__all__)


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        value = field.default
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value).__name__, dataclasses.asdict(value)
    return value


@pytest.mark.parametrize(
    ("areal_class", "rltap_class"),
    [
        pytest.param(
            cli_args.GenerationHyperparameters,
            rltap_io_struct.GenerationHyperparameters,
            id="GenerationHyperparameters",
        ),
        pytest.param(io_struct.ModelRequest, rltap_io_struct.ModelRequest, id="ModelRequest"),
        pytest.param(io_struct.ModelResponse, rltap_io_struct.ModelResponse, id="ModelResponse"),
    ],
)
def test_dataclasses_have_areals_fields_and_defaults(areal_class: type, rltap_class: type) -> None:
    theirs, ours = dataclasses.fields(areal_class), dataclasses.fields(rltap_class)
    assert [f.name for f in ours] == [f.name for f in theirs]
    for mine, areal_field in zip(ours, theirs, strict=True):
        if mine.name == "rid":  # a fresh uuid4 each time, on both sides
            assert len(_default(mine)) == len(_default(areal_field)) == 36
            continue
        assert _default(mine) == _default(areal_field), mine.name


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.default, p.kind) for p in inspect.signature(function).parameters.values()]


# (AReaL's class, rltap.areal's, the method whose parameters and defaults must agree)
SIGNATURES = [
    (areal_openai.ArealOpenAI, rltap.areal.ArealOpenAI, "__init__"),
    (areal_openai.ArealOpenAI, rltap.areal.ArealOpenAI, "apply_reward_discount"),
    (OpenAIProxyWorkflow, rltap.areal.OpenAIProxyWorkflow, "__init__"),
    (OpenAIProxyClient, rltap.areal.OpenAIProxyClient, "__init__"),
    (OpenAIProxyClient, rltap.areal.OpenAIProxyClient, "export_interactions"),
    (InteractionCache, rltap.areal.InteractionCache, "apply_reward_discount"),
    (InteractionCache, rltap.areal.InteractionCache, "export_interactions"),
]


@pytest.mark.parametrize(
    ("areal_class", "rltap_class", "method"),
    [pytest.param(*row, id=f"{row[0].__name__}.{row[2]}") for row in SIGNATURES],
)
def test_signatures_are_areals(areal_class: type, rltap_class: type, method: str) -> None:
    assert _parameters(getattr(rltap_class, method)) == _parameters(getattr(areal_class, method))
