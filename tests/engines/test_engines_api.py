from __future__ import annotations

import rltap.engines
from rltap.engines.base import InferenceEngine

EXPECTED_ALL = [
    "ENGINE_KINDS",
    "EngineKind",
    "InferenceEngine",
    "SGLangEngine",
    "ScriptedEngine",
    "TransformersEngine",
    "VLLMEngine",
    "create_engine",
]


def test_all_is_the_declared_public_api() -> None:
    assert sorted(rltap.engines.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert getattr(rltap.engines, name) is not None


def test_every_engine_class_satisfies_the_protocol() -> None:
    for name in ("ScriptedEngine", "SGLangEngine", "TransformersEngine", "VLLMEngine"):
        cls = getattr(rltap.engines, name)
        members = ("generate", "stream", "abort", "start", "close", "set_version", "version")
        for member in (*members, "update_weights", "takes_state_dict"):
            assert hasattr(cls, member), f"{name} lacks {member}"
    assert isinstance(
        rltap.engines.create_engine("vllm", url="http://127.0.0.1:9"), InferenceEngine
    )
