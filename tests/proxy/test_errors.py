"""The error matrix of every route, through a real uvicorn server: statuses and wire bodies.

OpenAI routes answer `{"error": {"message", "type", "param", "code"}}`, /v1/messages Anthropic's
`{"type": "error", "error": {"type", "message"}}`. Nothing a client sends yields a 5xx.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.engines.scripted import ScriptedEngine
from rltap.testing.proxy import RunningProxy, start_test_proxy
from rltap.testing.scripts import tool_loop

# One proxy for the whole module: every test here makes its own sessions.
pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_CONTEXT = 2048
MAX_BODY_BYTES = 64_000

CHAT_BODY: dict[str, Any] = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 16,
}
RESPONSES_BODY: dict[str, Any] = {"model": "tiny", "input": "hi", "max_output_tokens": 16}
MESSAGES_BODY: dict[str, Any] = {
    "model": "tiny",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
}
GENERATION_BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": CHAT_BODY,
    "/chat/completions": CHAT_BODY,
    "/v1/responses": RESPONSES_BODY,
    "/responses": RESPONSES_BODY,
    "/v1/messages": MESSAGES_BODY,
}
SESSION_ROUTES: dict[str, dict[str, Any]] = {
    **GENERATION_BODIES,
    "/rl/set_reward": {"reward": 1.0},
    "/rl/end_session": {},
}
ADMIN_ROUTES: dict[str, dict[str, Any]] = {
    "/grant_capacity": {},
    "/rl/start_session": {},
    "/export_trajectories": {"session_id": "0" * 32},
    "/rl/set_version": {"version": 0},
}
ALL_ROUTES = {**SESSION_ROUTES, **ADMIN_ROUTES}
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    410: "invalid_request_error",
    413: "request_too_large",
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxy(tiny_model: Any, renderer: ChatRenderer) -> AsyncIterator[RunningProxy]:
    engine = ScriptedEngine(tool_loop, tiny_model, tokenizer=renderer.tokenizer)
    config = ServeConfig(
        chat=ChatConfig(
            max_context=MAX_CONTEXT,
            default_max_tokens=256,
            reasoning_parser="qwen3",
            # `--strict-max-tokens`: max_tokens beyond the context left is refused, not cut
            # (the default, tests/proxy/test_max_tokens.py).
            strict_max_tokens=True,
        ),
        limits=LimitsConfig(capacity=1024, model_name="tiny", max_body_bytes=MAX_BODY_BYTES),
    )
    async with start_test_proxy(engine, renderer, config) as running:
        yield running


def assert_error(path: str, response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is `status` with the route's error envelope; returns the inner error."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
        assert body["error"]["type"] == ANTHROPIC_TYPES.get(status, body["error"]["type"])
    else:
        assert set(body) == {"error"}
        assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


async def post(
    proxy: RunningProxy,
    path: str,
    body: Any = None,
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
) -> httpx.Response:
    sent = dict(headers or {})
    if key is not None:
        sent["authorization"] = f"Bearer {key}"
    if content is not None:
        sent.setdefault("content-type", "application/json")
        return await proxy.http.post(f"{proxy.url}{path}", content=content, headers=sent)
    return await proxy.http.post(f"{proxy.url}{path}", json=body, headers=sent)


async def chat(proxy: RunningProxy, key: str, text: str = "hi") -> dict[str, Any]:
    body = {**CHAT_BODY, "messages": [{"role": "user", "content": text}]}
    response = await post(proxy, "/v1/chat/completions", body, key=key)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


# --- authentication and permission ---------------------------------------------------------


@pytest.mark.parametrize("path", [pytest.param(p, id=p) for p in ALL_ROUTES])
async def test_missing_key_is_401(proxy: RunningProxy, path: str) -> None:
    response = await post(proxy, path, ALL_ROUTES[path])
    error = assert_error(path, response, 401)
    if not path.startswith("/v1/messages"):
        assert error["type"] == "authentication_error"
        assert error["code"] == "invalid_api_key"


@pytest.mark.parametrize("path", [pytest.param(p, id=p) for p in ALL_ROUTES])
@pytest.mark.parametrize(
    "header",
    [pytest.param("authorization", id="bearer"), pytest.param("x-api-key", id="x-api-key")],
)
async def test_wrong_key_is_401(proxy: RunningProxy, path: str, header: str) -> None:
    value = "Bearer sk-not-a-key" if header == "authorization" else "sk-not-a-key"
    response = await post(proxy, path, ALL_ROUTES[path], headers={header: value})
    assert_error(path, response, 401)


@pytest.mark.parametrize("path", [pytest.param(p, id=p) for p in SESSION_ROUTES])
async def test_admin_key_on_a_session_route_is_403(proxy: RunningProxy, path: str) -> None:
    response = await post(proxy, path, SESSION_ROUTES[path], key=proxy.admin_key)
    error = assert_error(path, response, 403)
    if not path.startswith("/v1/messages"):
        assert error["type"] == "permission_error"


@pytest.mark.parametrize("path", [pytest.param(p, id=p) for p in ADMIN_ROUTES])
async def test_session_key_on_an_admin_route_is_403(proxy: RunningProxy, path: str) -> None:
    session_id, key = await proxy.start_session()
    body = ADMIN_ROUTES[path]
    if path == "/export_trajectories":
        body = {"session_id": session_id}  # even its own session: export needs the admin key
    response = await post(proxy, path, body, key=key)
    error = assert_error(path, response, 403)
    assert error["type"] == "permission_error"


async def test_a_session_key_acts_only_on_its_own_session(proxy: RunningProxy) -> None:
    session_a, key_a = await proxy.start_session()
    session_b, key_b = await proxy.start_session()
    reply_a = await chat(proxy, key_a, "from a")

    # B cannot reward A's interaction: it does not exist in B's session.
    response = await post(
        proxy, "/rl/set_reward", {"interaction_id": reply_a["id"], "reward": 5.0}, key=key_b
    )
    assert_error("/rl/set_reward", response, 404)
    # B cannot export A (export needs the admin key).
    response = await post(proxy, "/export_trajectories", {"session_id": session_a}, key=key_b)
    assert_error("/export_trajectories", response, 403)
    # B's calls and its end land in B only.
    reply_b = await chat(proxy, key_b, "from b")
    response = await post(proxy, "/rl/end_session", key=key_b)
    assert response.status_code == 200, response.text
    assert response.json()["session_id"] == session_b

    second_a = await chat(proxy, key_a, "still a")
    assert (await post(proxy, "/rl/end_session", key=key_a)).status_code == 200
    export_a = await proxy.export(session_a)
    assert [i["interaction_id"] for i in export_a["interactions"]] == [
        reply_a["id"],
        second_a["id"],
    ]
    assert [i["reward"] for i in export_a["interactions"]] == [0.0, 0.0]
    export_b = await proxy.export(session_b)
    assert [i["interaction_id"] for i in export_b["interactions"]] == [reply_b["id"]]


@pytest.mark.parametrize("path", [pytest.param(p, id=p) for p in SESSION_ROUTES])
async def test_an_ended_session_answers_410(proxy: RunningProxy, path: str) -> None:
    _, key = await proxy.start_session()
    assert (await post(proxy, "/rl/end_session", key=key)).status_code == 200
    response = await post(proxy, path, SESSION_ROUTES[path], key=key)
    error = assert_error(path, response, 410)
    if not path.startswith("/v1/messages"):
        assert error["code"] == "session_ended"


async def test_an_exported_session_key_is_unknown(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    assert (await post(proxy, "/rl/end_session", key=key)).status_code == 200
    await proxy.export(session_id)
    assert_error("/v1/chat/completions", await post(proxy, "/v1/chat/completions", CHAT_BODY), 401)
    response = await post(proxy, "/v1/chat/completions", CHAT_BODY, key=key)
    assert_error("/v1/chat/completions", response, 401)


# --- malformed bodies ----------------------------------------------------------------------

JSON_ROUTES = [
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/responses",
    "/responses",
    "/v1/messages",
    "/rl/set_reward",
    "/rl/start_session",
    "/export_trajectories",
    "/rl/set_version",
]


async def key_for(proxy: RunningProxy, path: str) -> str:
    if path in ADMIN_ROUTES:
        return proxy.admin_key
    _, key = await proxy.start_session()
    return key


@pytest.mark.parametrize("path", [pytest.param(p, id=p) for p in JSON_ROUTES])
@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"model": "tiny", "messages": [', id="truncated"),
        pytest.param(b"{'single': 'quotes'}", id="not-json"),
        pytest.param(b'{"reward": NaN}', id="nan-literal"),
        pytest.param(b"[1, 2]", id="array"),
        pytest.param(b'"text"', id="string"),
        pytest.param(b"null", id="null"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_400(
    proxy: RunningProxy, path: str, raw: bytes
) -> None:
    response = await post(proxy, path, key=await key_for(proxy, path), content=raw)
    error = assert_error(path, response, 400)
    if not path.startswith("/v1/messages"):
        assert error["type"] == "invalid_request_error"


BAD_BODIES = [
    pytest.param("/v1/chat/completions", {"model": "tiny", "messages": "hi"}, id="chat-messages"),
    pytest.param("/v1/chat/completions", {"model": "tiny", "messages": []}, id="chat-empty"),
    pytest.param(
        "/v1/chat/completions",
        {**CHAT_BODY, "messages": [{"role": "wizard", "content": "x"}]},
        id="chat-role",
    ),
    pytest.param("/v1/chat/completions", {**CHAT_BODY, "max_tokens": "eight"}, id="chat-max-str"),
    pytest.param("/v1/chat/completions", {**CHAT_BODY, "max_tokens": 0}, id="chat-max-0"),
    pytest.param("/v1/chat/completions", {**CHAT_BODY, "temperature": -1}, id="chat-temp"),
    pytest.param("/v1/chat/completions", {**CHAT_BODY, "top_p": 0}, id="chat-top-p-0"),
    pytest.param("/v1/chat/completions", {**CHAT_BODY, "top_p": 1.5}, id="chat-top-p-big"),
    pytest.param("/v1/chat/completions", {**CHAT_BODY, "n": 0}, id="chat-n"),
    pytest.param("/v1/chat/completions", {**CHAT_BODY, "top_logprobs": 99}, id="chat-top-lp"),
    pytest.param("/chat/completions", {**CHAT_BODY, "temperature": "hot"}, id="alias-temp"),
    pytest.param("/v1/responses", {"model": "tiny", "input": 5}, id="responses-input"),
    pytest.param("/v1/responses", {"model": "tiny", "input": []}, id="responses-empty"),
    pytest.param("/v1/responses", {**RESPONSES_BODY, "temperature": -0.5}, id="responses-temp"),
    pytest.param("/responses", {**RESPONSES_BODY, "top_p": 2}, id="alias-top-p"),
    pytest.param("/v1/responses", {**RESPONSES_BODY, "max_output_tokens": 0}, id="responses-max-0"),
    pytest.param(
        "/v1/responses", {**RESPONSES_BODY, "tools": [{"type": "web_search"}]}, id="responses-tool"
    ),
    pytest.param("/v1/messages", {"model": "tiny", "messages": "hi"}, id="messages-messages"),
    pytest.param("/v1/messages", {**MESSAGES_BODY, "max_tokens": "many"}, id="messages-max-str"),
    pytest.param("/v1/messages", {**MESSAGES_BODY, "max_tokens": 0}, id="messages-max-0"),
    pytest.param("/v1/messages", {**MESSAGES_BODY, "temperature": -1}, id="messages-temp"),
    pytest.param("/v1/messages", {**MESSAGES_BODY, "top_p": 2}, id="messages-top-p"),
    pytest.param("/v1/messages", {**MESSAGES_BODY, "top_k": -3}, id="messages-top-k"),
    pytest.param("/rl/set_reward", {}, id="reward-missing"),
    pytest.param("/rl/set_reward", {"reward": "1.0"}, id="reward-string"),
    pytest.param("/rl/set_reward", {"reward": True}, id="reward-bool"),
    pytest.param("/rl/set_reward", {"reward": None}, id="reward-null"),
    pytest.param("/rl/set_reward", {"reward": [1]}, id="reward-list"),
    pytest.param("/rl/set_reward", {"reward": 1.0, "interaction_id": 5}, id="reward-id-int"),
    pytest.param("/rl/start_session", {"api_key": 5}, id="start-key-int"),
    pytest.param("/rl/start_session", {"api_key": "  "}, id="start-key-blank"),
    pytest.param("/rl/start_session", {"task_id": ["t"]}, id="start-task-list"),
    pytest.param("/export_trajectories", {}, id="export-no-session"),
    pytest.param("/export_trajectories", {"session_id": 5}, id="export-session-int"),
    pytest.param("/export_trajectories", {"session_id": "x", "discount": "1"}, id="export-disc"),
    pytest.param("/export_trajectories", {"session_id": "x", "discount": 1.5}, id="export-disc-1"),
    pytest.param("/export_trajectories", {"session_id": "x", "style": 1}, id="export-style-int"),
    pytest.param(
        "/export_trajectories", {"session_id": "x", "wait_timeout": -1}, id="export-wait-neg"
    ),
    pytest.param("/rl/set_version", {}, id="version-missing"),
    pytest.param("/rl/set_version", {"version": "1"}, id="version-string"),
    pytest.param("/rl/set_version", {"version": -1}, id="version-negative"),
    pytest.param("/rl/set_version", {"version": 1.5}, id="version-float"),
    pytest.param("/rl/set_version", {"version": True}, id="version-bool"),
]


@pytest.mark.parametrize(("path", "body"), BAD_BODIES)
async def test_an_invalid_field_is_400(proxy: RunningProxy, path: str, body: Any) -> None:
    key = await key_for(proxy, path)
    if path == "/rl/set_reward":
        await chat(proxy, key)  # a reply to reward, so only the body is wrong
    response = await post(proxy, path, body, key=key)
    error = assert_error(path, response, 400)
    if not path.startswith("/v1/messages"):
        assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/rl/set_reward", b'{"reward": 1e999}', id="infinite"),
        pytest.param("/rl/set_reward", b'{"reward": -1e999}', id="minus-infinite"),
        pytest.param("/rl/set_reward", b'{"reward": Infinity}', id="infinity-literal"),
    ],
)
async def test_a_non_finite_reward_is_400(proxy: RunningProxy, path: str, body: bytes) -> None:
    session_id, key = await proxy.start_session()
    await chat(proxy, key)
    assert_error(path, await post(proxy, path, key=key, content=body), 400)
    # The reply is unrewarded: the bad reward was not stored.
    assert (await post(proxy, "/rl/end_session", key=key)).status_code == 200
    export = await proxy.export(session_id)
    assert [i["reward"] for i in export["interactions"]] == [0.0]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/v1/chat/completions", {**CHAT_BODY, "max_tokens": 4096}, id="chat"),
        pytest.param(
            "/v1/chat/completions",
            {**CHAT_BODY, "max_completion_tokens": MAX_CONTEXT},
            id="chat-max-completion",
        ),
        pytest.param(
            "/chat/completions", {**CHAT_BODY, "max_tokens": 4096, "stream": True}, id="chat-sse"
        ),
        pytest.param(
            "/v1/chat/completions",
            {**CHAT_BODY, "max_tokens": 1, "messages": [{"role": "user", "content": "go " * 3000}]},
            id="chat-long-prompt",
        ),
        pytest.param("/v1/responses", {**RESPONSES_BODY, "max_output_tokens": 4096}, id="resp"),
        pytest.param(
            "/responses",
            {**RESPONSES_BODY, "max_output_tokens": 4096, "stream": True},
            id="resp-sse",
        ),
        pytest.param("/v1/messages", {**MESSAGES_BODY, "max_tokens": 4096}, id="messages"),
        pytest.param(
            "/v1/messages", {**MESSAGES_BODY, "max_tokens": 4096, "stream": True}, id="messages-sse"
        ),
    ],
)
async def test_prompt_plus_max_tokens_over_the_context_is_400_when_strict(
    proxy: RunningProxy, path: str, body: dict[str, Any]
) -> None:
    session_id, key = await proxy.start_session()
    response = await post(proxy, path, body, key=key)
    error = assert_error(path, response, 400)
    assert str(MAX_CONTEXT) in error["message"]
    if not path.startswith("/v1/messages"):
        assert error["code"] == "context_length_exceeded"
        assert error["type"] == "invalid_request_error"
    # Nothing was generated, and the session still works.
    await chat(proxy, key)
    assert (await post(proxy, "/rl/end_session", key=key)).status_code == 200
    export = await proxy.export(session_id)
    assert len(export["interactions"]) == 1
    assert [i["status"] for i in export["not_exported"]] == ["failed"]


# --- not found, conflicts ------------------------------------------------------------------


async def test_unknown_interaction_and_session_are_404(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    response = await post(proxy, "/rl/set_reward", {"reward": 1.0}, key=key)
    assert_error("/rl/set_reward", response, 404)  # no reply to reward yet
    await chat(proxy, key)
    body = {"interaction_id": "chatcmpl-unknown", "reward": 1.0}
    error = assert_error("/rl/set_reward", await post(proxy, "/rl/set_reward", body, key=key), 404)
    assert error["param"] == "interaction_id"
    response = await proxy.admin("/export_trajectories", {"session_id": "no-such-session"})
    error = assert_error("/export_trajectories", response, 404)
    assert error["param"] == "session_id"
    response = await post(
        proxy, "/v1/responses", {**RESPONSES_BODY, "previous_response_id": "resp_nope"}, key=key
    )
    error = assert_error("/v1/responses", response, 404)
    assert error["param"] == "previous_response_id"


async def test_caller_chosen_session_keys(proxy: RunningProxy) -> None:
    response = await proxy.admin("/rl/start_session", {"api_key": proxy.admin_key})
    error = assert_error("/rl/start_session", response, 400)
    assert error["param"] == "api_key"

    chosen = "sk-chosen-by-the-trainer"
    session_id, key = await proxy.start_session(api_key=chosen, task_id="task-7")
    assert key == chosen
    response = await proxy.admin("/rl/start_session", {"api_key": chosen})
    error = assert_error("/rl/start_session", response, 409)
    assert error["type"] == "conflict_error"
    await chat(proxy, chosen)

    # Once that session ended, the key may start a new one; the old one stays exportable.
    assert (await post(proxy, "/rl/end_session", key=chosen)).status_code == 200
    new_session_id, _ = await proxy.start_session(api_key=chosen)
    reply = await chat(proxy, chosen, "second session")
    export = await proxy.export(session_id)
    assert export["task_id"] == "task-7"
    assert len(export["interactions"]) == 1
    assert reply["id"] not in [i["interaction_id"] for i in export["interactions"]]
    assert (await post(proxy, "/rl/end_session", key=chosen)).status_code == 200
    export = await proxy.export(new_session_id)
    assert [i["interaction_id"] for i in export["interactions"]] == [reply["id"]]


async def test_an_invalid_export_request_does_not_free_the_session(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    await chat(proxy, key)
    assert (await post(proxy, "/rl/end_session", key=key)).status_code == 200
    for body in ({"style": "bogus"}, {"aggregate": "median"}):
        response = await proxy.admin("/export_trajectories", {"session_id": session_id, **body})
        error = assert_error("/export_trajectories", response, 400)
        assert error["param"] == next(iter(body))
    export = await proxy.export(session_id, style="concat")
    assert len(export["interactions"]) == 1


# --- body limit ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p) for p in ("/v1/chat/completions", "/v1/messages")]
)
@pytest.mark.parametrize(
    "chunked", [pytest.param(False, id="content-length"), pytest.param(True, id="chunked")]
)
async def test_a_body_over_the_limit_is_413(proxy: RunningProxy, path: str, chunked: bool) -> None:
    _, key = await proxy.start_session()
    filler = "x" * (MAX_BODY_BYTES // 4)
    raw = (
        b'{"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "'
        + (filler * 5).encode()
        + b'"}]}'
    )
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    if chunked:

        async def pieces() -> AsyncIterator[bytes]:
            for start in range(0, len(raw), 8192):
                yield raw[start : start + 8192]

        response = await proxy.http.post(f"{proxy.url}{path}", content=pieces(), headers=headers)
        assert "content-length" not in response.request.headers
    else:
        response = await proxy.http.post(f"{proxy.url}{path}", content=raw, headers=headers)
    error = assert_error(path, response, 413)
    if not path.startswith("/v1/messages"):
        assert error["type"] == "request_too_large"
    # A body under the limit still works on the same session.
    await chat(proxy, key)


# --- routes and methods --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/nowhere", 404, id="get-unknown"),
        pytest.param("POST", "/v1/completions", 404, id="post-unknown"),
        pytest.param("POST", "/v1/messages/batches", 404, id="anthropic-unknown"),
        pytest.param("GET", "/v1/chat/completions", 405, id="wrong-method"),
        pytest.param("DELETE", "/rl/start_session", 405, id="wrong-method-admin"),
    ],
)
async def test_unknown_routes_answer_in_the_envelope(
    proxy: RunningProxy, method: str, path: str, status: int
) -> None:
    headers = {"authorization": f"Bearer {proxy.admin_key}"}
    response = await proxy.http.request(method, f"{proxy.url}{path}", headers=headers)
    assert_error(path, response, status)


# --- nothing yields a 5xx ------------------------------------------------------------------

HOSTILE: list[tuple[str, Any]] = [
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": None}]}),
    ("/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "assistant", "content": None}]}),
    ("/v1/chat/completions", {"messages": [{}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "nope"}]}]}),
    (
        "/v1/chat/completions",
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
            ]
        },
    ),
    ("/v1/chat/completions", {**CHAT_BODY, "tools": [{"type": "function"}]}),
    (
        "/v1/chat/completions",
        {**CHAT_BODY, "tools": [{"type": "function", "function": {"name": "f", "parameters": 1}}]},
    ),
    (
        "/v1/chat/completions",
        {**CHAT_BODY, "tool_choice": {"type": "function", "function": {"name": "missing"}}},
    ),
    ("/v1/chat/completions", {**CHAT_BODY, "tool_choice": "required"}),
    ("/v1/chat/completions", {**CHAT_BODY, "stop": 5}),
    ("/v1/chat/completions", {**CHAT_BODY, "stop": ["a"] * 100}),
    ("/v1/chat/completions", {**CHAT_BODY, "n": 1000}),
    ("/v1/chat/completions", {**CHAT_BODY, "seed": 2**70}),
    ("/v1/chat/completions", {**CHAT_BODY, "max_tokens": 2**70}),
    ("/v1/chat/completions", {**CHAT_BODY, "logprobs": True, "top_logprobs": 5}),
    ("/v1/chat/completions", {**CHAT_BODY, "stream_options": {"include_usage": "x"}}),
    ("/v1/chat/completions", {**CHAT_BODY, "stream_options": 5}),
    # A valid format would be honoured: the scripted reply then breaks its grammar (a 502 of
    # the fake engine, as meant); a schema that cannot compile is the client's mistake, a 400.
    (
        "/v1/chat/completions",
        {
            **CHAT_BODY,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "strin"}},
            },
        },
    ),
    ("/v1/chat/completions", {**CHAT_BODY, "response_format": {"type": "json_schema"}}),
    ("/v1/chat/completions", {**CHAT_BODY, "model": None}),
    ("/v1/chat/completions", {**CHAT_BODY, "chat_template_kwargs": "x"}),
    ("/v1/responses", {"input": [{"type": "function_call_output", "call_id": "x", "output": "y"}]}),
    ("/v1/responses", {"input": [{"type": "mystery"}]}),
    ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
    ("/v1/responses", {**RESPONSES_BODY, "conversation": "conv_1"}),
    ("/v1/responses", {**RESPONSES_BODY, "background": True}),
    ("/v1/responses", {**RESPONSES_BODY, "tool_choice": {"type": "function", "name": "x"}}),
    ("/v1/responses", {**RESPONSES_BODY, "reasoning": {"effort": "enormous"}}),
    ("/v1/responses", {**RESPONSES_BODY, "text": {"format": {"type": "json_schema"}}}),
    ("/v1/responses", {"previous_response_id": 5}),
    ("/v1/messages", {**MESSAGES_BODY, "messages": [{"role": "assistant", "content": "x"}]}),
    ("/v1/messages", {**MESSAGES_BODY, "messages": [{"role": "user", "content": []}]}),
    (
        "/v1/messages",
        {**MESSAGES_BODY, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
    ),
    (
        "/v1/messages",
        {
            **MESSAGES_BODY,
            "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
            ],
        },
    ),
    ("/v1/messages", {**MESSAGES_BODY, "system": 5}),
    ("/v1/messages", {**MESSAGES_BODY, "max_tokens": None}),
    ("/v1/messages", {**MESSAGES_BODY, "thinking": {"type": "enabled", "budget_tokens": 10}}),
    ("/v1/messages", {**MESSAGES_BODY, "tool_choice": {"type": "tool", "name": "missing"}}),
    ("/v1/messages", {**MESSAGES_BODY, "tools": [{"name": "t"}]}),
    ("/v1/messages", {**MESSAGES_BODY, "stop_sequences": "x"}),
    ("/rl/set_reward", {"reward": 1e308}),
    ("/rl/set_reward", {"reward": {"a": 1}}),
    ("/rl/set_reward", {"reward": 1.0, "interaction_id": ""}),
    ("/rl/start_session", {"api_key": "\u0000"}),
    ("/rl/start_session", {"task_id": 5}),
    ("/export_trajectories", {"session_id": "x", "wait_timeout": 1e9}),
    ("/export_trajectories", {"session_id": "x", "wait_timeout": "soon"}),
    ("/export_trajectories", {"session_id": "x", "aggregate": 5}),
    ("/export_trajectories", {"session_id": "x", "discount": -0.1}),
    ("/rl/set_version", {"version": 2**70}),
    ("/rl/set_version", {"version": [1]}),
]


def _server_errors(metrics_text: str) -> list[tuple[str, str]]:
    return [
        (sample.labels["route"], sample.labels["status"])
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name == "rltap_requests_total" and sample.labels["status"].startswith("5")
    ]


async def test_nothing_a_client_sends_yields_a_5xx(proxy: RunningProxy) -> None:
    deep = b"[" * 5000 + b"]" * 5000
    raw_bodies = [deep, b'{"messages": "\\ud800"}', b"{" + b'"a": 1, ' * 2000 + b'"b": 2}']
    statuses: list[tuple[str, int]] = []
    for path, body in HOSTILE:
        response = await post(proxy, path, body, key=await key_for(proxy, path))
        assert response.status_code < 500, (path, body, response.text)
        if response.status_code >= 400:
            assert_error(path, response, response.status_code)
        statuses.append((path, response.status_code))
    for path in JSON_ROUTES:
        for raw in raw_bodies:
            response = await post(proxy, path, key=await key_for(proxy, path), content=raw)
            assert response.status_code < 500, (path, raw[:40], response.text)
            if response.status_code >= 400:
                assert_error(path, response, response.status_code)
            statuses.append((path, response.status_code))
    # Every request this module sent so far, as the proxy counted them: none was a 5xx.
    metrics = await proxy.http.get(f"{proxy.url}/metrics")
    assert _server_errors(metrics.text) == []
    assert any(status >= 400 for _, status in statuses)
