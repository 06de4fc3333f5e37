from __future__ import annotations

import rltap

EXPECTED_ALL = [
    "InteractionCache",
    "InteractionStatus",
    "InteractionWithTokenLogpReward",
    "LogprobConvention",
    "ModelRequest",
    "ModelResponse",
    "StopReason",
    "TokenChunk",
    "TokenSequence",
    "concat_padded_tensors",
]


def test_all_is_the_declared_public_api() -> None:
    assert sorted(rltap.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert getattr(rltap, name) is not None
