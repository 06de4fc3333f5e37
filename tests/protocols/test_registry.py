"""The registry of wire APIs (`rltap.protocols.SPECS`): what the proxy serves and how ids look."""

from __future__ import annotations

from typing import Any

import pytest

from rltap.chat.renderer import ChatRenderer
from rltap.engines.scripted import ScriptedEngine
from rltap.protocols import (
    SPECS,
    ApiSpec,
    anthropic_messages,
    openai_chat,
    openai_responses,
    operation_for,
    spec_for_path,
    spec_named,
)
from rltap.proxy.app import create_app
from rltap.record.generation import Generation
from rltap.record.parsed import ParsedOutput
from rltap.record.types import ModelResponse
from rltap.testing.proxy import TEST_ADMIN_KEY
from rltap.testing.scripts import echo

from .wire import assistant_message

SPEC_PARAMS = [pytest.param(spec, id=name) for name, spec in SPECS.items()]
USER = {"role": "user", "content": "hi"}
SMALLEST_BODY: dict[str, dict[str, Any]] = {
    "chat": {"model": "m", "messages": [USER]},
    "responses": {"model": "m", "input": "hi"},
    "messages": {"model": "m", "max_tokens": 8, "messages": [USER]},
}


def test_every_api_package_is_registered_by_its_name() -> None:
    packages = [openai_chat, openai_responses, anthropic_messages]
    assert {package.SPEC.name: package.SPEC for package in packages} == SPECS
    assert all(spec_named(name) is spec for name, spec in SPECS.items())


def test_the_app_serves_every_path_of_every_spec(tiny_model: Any, renderer: ChatRenderer) -> None:
    engine = ScriptedEngine(echo, tiny_model, tokenizer=renderer.tokenizer)
    app = create_app(engine, renderer, admin_key=TEST_ADMIN_KEY)
    routes = app.openapi()["paths"]
    for spec in SPECS.values():
        for path in spec.paths:
            assert "post" in routes[path], path
            assert routes[path]["post"]["summary"] == spec.title


def test_the_app_documents_every_operation_of_every_spec(
    tiny_model: Any, renderer: ChatRenderer
) -> None:
    engine = ScriptedEngine(echo, tiny_model, tokenizer=renderer.tokenizer)
    app = create_app(engine, renderer, admin_key=TEST_ADMIN_KEY)
    routes = app.openapi()["paths"]
    operations = [op for spec in SPECS.values() for op in spec.operations]
    assert operations  # Responses' and Anthropic's
    for operation in operations:
        documented = routes[operation.path][operation.method.lower()]
        assert documented["summary"] == operation.summary
        names = {p["name"] for p in documented.get("parameters", []) if p["in"] == "path"}
        assert names == set(operation.params)
        assert ("requestBody" in documented) == (operation.body is not None)


@pytest.mark.parametrize(
    ("method", "path", "name", "params"),
    [
        pytest.param("GET", "/v1/responses/resp_1", "responses", {"response_id": "resp_1"}),
        pytest.param("POST", "/v1/responses/compact", "responses", {}, id="compact"),
        pytest.param(
            "DELETE",
            "/v1/conversations/conv_1/items/msg_2/",
            "responses",
            {"conversation_id": "conv_1", "item_id": "msg_2"},
            id="item",
        ),
        pytest.param("POST", "/v1/messages/count_tokens", "messages", {}, id="count"),
    ],
)
def test_operation_for(method: str, path: str, name: str, params: dict[str, str]) -> None:
    found = operation_for(method, path)
    assert found is not None
    spec, operation, matched = found
    assert (spec.name, operation.method, matched) == (name, method, params)
    assert operation in spec.operations


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("POST", "/v1/responses", id="a-generation-route"),
        pytest.param("PUT", "/v1/conversations/c", id="other-method"),
        pytest.param("GET", "/v1/conversations/c/x", id="below-an-operation"),
        pytest.param("GET", "/v1/responses", id="above-a-parameter"),
    ],
)
def test_operation_for_anything_else_is_none(method: str, path: str) -> None:
    assert operation_for(method, path) is None


@pytest.mark.parametrize(
    ("path", "name"),
    [
        *(pytest.param(p, s.name, id=p) for s in SPECS.values() for p in s.paths),
        pytest.param("/v1/messages/count_tokens", "messages", id="below-a-route"),
    ],
)
def test_spec_for_path(path: str, name: str) -> None:
    spec = spec_for_path(path)
    assert spec is not None
    assert spec.name == name


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/v1/completions", id="other-api"),
        pytest.param("/v1/chat", id="above-a-route"),
        pytest.param("/v1/messagesx", id="prefix-of-a-name"),
        pytest.param("/rl/start_session", id="admin-route"),
    ],
)
def test_spec_for_an_unknown_path_is_none(path: str) -> None:
    assert spec_for_path(path) is None


@pytest.mark.parametrize("spec", SPEC_PARAMS)
def test_reply_ids_begin_with_the_id_prefix(spec: ApiSpec) -> None:
    interaction_id = spec.new_interaction_id()
    generation = Generation(
        index=0,
        interaction_id=interaction_id,
        response=ModelResponse(
            input_tokens=[1, 2], output_tokens=[3], output_logprobs=[-0.5], output_versions=[0]
        ),
        parsed=ParsedOutput(content="hello"),
        finish_reason="stop",
        output_message=assistant_message("hello", None, []),
    )
    body = spec.build_response(spec.parse(SMALLEST_BODY[spec.name]), [generation])
    assert body["id"] == interaction_id
    assert body["id"].startswith(spec.id_prefix)
    assert len(body["id"]) > len(spec.id_prefix)
