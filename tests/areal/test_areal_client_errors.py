"""`rltap.areal.ArealOpenAI`'s mistakes raise what AReaL 1.0.4 raises (TypeError, ValueError,
KeyError, RuntimeError); what an AReaL engine cannot honour is refused by name; an engine
failure is rltap's EngineError and never training data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rltap.areal import ArealOpenAI
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import ContextLengthExceeded, EngineError
from rltap.record.types import InteractionStatus
from rltap.testing.areal_engine import ScriptedArealEngine

ClientFactory = Callable[..., tuple[ArealOpenAI, ScriptedArealEngine]]  # the areal_client fixture

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param(None, id="none"),
        pytest.param("What is 2+2?", id="a-string"),
        pytest.param({"role": "user", "content": "hi"}, id="a-dict"),
        pytest.param(["What is 2+2?"], id="a-string-message"),
        pytest.param([("user", "hi")], id="a-tuple-message"),
    ],
)
async def test_messages_that_are_not_an_iterable_of_dicts_are_a_type_error(
    areal_client: ClientFactory, messages: Any
) -> None:
    client, engine = areal_client(["4"])
    with pytest.raises(TypeError, match="messages"):
        await client.chat.completions.create(messages=messages)
    assert engine.requests == []


async def test_a_prompt_over_engine_max_tokens_is_a_value_error(
    areal_client: ClientFactory,
) -> None:
    client, engine = areal_client(["4"], engine_max_tokens=8)
    with pytest.raises(ValueError, match="8") as raised:
        await client.chat.completions.create(messages=QUESTION)
    assert isinstance(raised.value, ContextLengthExceeded)
    assert engine.requests == []
    assert client.export_interactions(style="individual") == {}


@pytest.mark.parametrize(
    ("params", "named"),
    [
        pytest.param({"seed": 7}, "seed", id="seed"),
        pytest.param(
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "answer",
                        "schema": {
                            "type": "object",
                            "properties": {"value": {"type": "integer"}},
                            "required": ["value"],
                        },
                    },
                }
            },
            "response_format",
            id="json-schema",
        ),
    ],
)
async def test_what_an_areal_engine_cannot_honour_is_a_value_error_naming_it(
    areal_client: ClientFactory, params: dict[str, Any], named: str
) -> None:
    client, engine = areal_client(["4"])
    with pytest.raises(ValueError, match="AReaL engine") as raised:
        await client.chat.completions.create(messages=QUESTION, **params)
    assert getattr(raised.value, "param", None) == named
    assert engine.requests == []


def test_an_unknown_parser_name_lists_the_known_ones(qwen_tokenizer: Any) -> None:
    engine = ScriptedArealEngine(qwen_tokenizer, [])
    with pytest.raises(LookupError, match="qwen25") as raised:
        ArealOpenAI(engine=engine, tokenizer=qwen_tokenizer, tool_call_parser="no-such-parser")
    assert "no-such-parser" in str(raised.value)


async def test_unknown_ids_and_an_empty_client(areal_client: ClientFactory) -> None:
    client, _ = areal_client([])
    assert client.get_interaction("chatcmpl-unknown") is None
    with pytest.raises(KeyError):
        client.set_reward("chatcmpl-unknown", 1.0)
    with pytest.raises(RuntimeError, match="No interaction"):
        client.set_last_reward(1.0)


def test_lora_name_with_an_rltap_engine_is_a_value_error(qwen_tokenizer: Any) -> None:
    # rltap's own engines serve no LoRA adapters: the name would be dropped, so it is refused.
    engine = VLLMEngine("http://127.0.0.1:9")  # never contacted: refused at construction
    with pytest.raises(ValueError, match="lora_name"):
        ArealOpenAI(engine=engine, tokenizer=qwen_tokenizer, lora_name="math-lora")
    assert ArealOpenAI(engine=engine, tokenizer=qwen_tokenizer).engine is engine  # no LoRA: taken


def test_an_engine_without_agenerate_and_get_version_is_a_type_error(
    qwen_tokenizer: Any,
) -> None:
    with pytest.raises(TypeError, match="agenerate, get_version"):
        ArealOpenAI(engine=object(), tokenizer=qwen_tokenizer)


async def test_an_engine_failure_is_an_engine_error_recorded_failed_and_not_exported(
    areal_client: ClientFactory,
) -> None:
    client, _ = areal_client([])  # the fake raises RuntimeError: it has no reply to give
    with pytest.raises(EngineError, match="RuntimeError") as raised:
        await client.chat.completions.create(messages=QUESTION)
    assert raised.value.status_code == 502
    (recorded,) = client.cache.values()
    assert recorded.status is InteractionStatus.FAILED
    assert client.export_interactions(style="individual") == {}
