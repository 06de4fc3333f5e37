from __future__ import annotations

import pytest

import rltap

EXPECTED_ALL = [
    "ArealOpenAI",
    "DirectOpenAI",
    "GroupedRolloutWorkflow",
    "InteractionCache",
    "InteractionStatus",
    "InteractionWithTokenLogpReward",
    "Link",
    "LogprobConvention",
    "ModelRequest",
    "ModelResponse",
    "OpenAIProxyClient",
    "OpenAIProxyWorkflow",
    "RolloutWorkflow",
    "StopReason",
    "TokenChunk",
    "TokenSequence",
    "WorkflowSettings",
    "concat_padded_tensors",
    "resolve_workflow",
]


def test_all_is_the_declared_public_api() -> None:
    assert sorted(rltap.__all__) == sorted(EXPECTED_ALL)


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(rltap, name) is not None


def test_the_seed_names_import_from_the_package() -> None:
    from rltap import (
        ArealOpenAI,
        InteractionWithTokenLogpReward,
        OpenAIProxyClient,
        OpenAIProxyWorkflow,
    )

    assert ArealOpenAI.__module__ == "rltap.areal.client"  # AReaL's contract, as rltap.areal's
    assert InteractionWithTokenLogpReward.__module__ == "rltap.record.types"
    assert OpenAIProxyClient.__module__ == "rltap.client.proxy"
    assert OpenAIProxyWorkflow.__module__ == "rltap.rollout.workflow"


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = rltap.NoSuchThing  # type: ignore[attr-defined]
