"""Bad input: schemathesis over every route, then handcrafted hostile bodies. None yields a 5xx or
a hang; every refusal is a 4xx in the route's error format (Anthropic's on /v1/messages).

The document fuzzed is the app's own: it gives the generation routes their request bodies (the
protocols' pydantic models); the RL routes parse their bodies by hand, so the fields they read are
added here.

Covered elsewhere, not repeated here: malformed JSON, bodies that are not objects, wrong types
of every field, NaN/Infinity literals and non-finite or string rewards, unknown interaction and
session ids, bodies over the limit (by Content-Length and chunked), unknown routes and methods
(tests/proxy/test_errors.py).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from reliability_support import (
    GENERATION_PATHS,
    HeldEngine,
    assert_envelope,
    assert_error,
    proxy_config,
)

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import LimitsConfig
from rltap.proxy.app import create_app
from rltap.proxy.server import ProxyServer
from rltap.testing.proxy import TEST_ADMIN_KEY, RunningProxy

# --- schemathesis ---------------------------------------------------------------------------

MAX_EXAMPLES = 30
ADMIN_ROUTES = {"/grant_capacity", "/rl/start_session", "/rl/set_version", "/export_trajectories"}
OPEN_ROUTES = {"/health", "/metrics"}
GENERATION_ROUTES = [
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/responses",
    "/responses",
    "/v1/messages",
]
NUMBER = {"type": "number"}
STRING = {"type": "string"}
RL_BODIES: dict[str, dict[str, Any]] = {
    "/rl/set_reward": {
        "type": "object",
        "properties": {"reward": NUMBER, "interaction_id": STRING},
        "required": ["reward"],
    },
    "/rl/start_session": {"type": "object", "properties": {"task_id": STRING, "api_key": STRING}},
    "/rl/set_version": {
        "type": "object",
        "properties": {"version": {"type": "integer", "minimum": 0}},
        "required": ["version"],
    },
    "/export_trajectories": {
        "type": "object",
        "properties": {
            "session_id": STRING,
            "discount": {"type": "number", "minimum": 0, "maximum": 1},
            "style": {"enum": ["individual", "concat"]},
            "aggregate": {"enum": ["mean", "sum", "max", "min"]},
            "wait_timeout": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["session_id"],
    },
}
BODY_ROUTES = [*GENERATION_ROUTES, *RL_BODIES]
# Negative cases break the request body; routes that read none have nothing to break.
POSITIVE = schemathesis.GenerationMode.POSITIVE
FUZZ_CASES = [
    *[("POST", path, mode) for path in BODY_ROUTES for mode in schemathesis.GenerationMode],
    *[("POST", path, POSITIVE) for path in ("/grant_capacity", "/rl/end_session")],
    *[("GET", path, POSITIVE) for path in ("/health", "/v1/models", "/metrics")],
]


def openapi_document(app_document: dict[str, Any]) -> dict[str, Any]:
    """The app's OpenAPI document with a JSON request body on every route that reads one."""
    document = json.loads(json.dumps(app_document))
    for path in GENERATION_ROUTES:
        assert "requestBody" in document["paths"][path]["post"], path
    for path, schema in RL_BODIES.items():
        document["paths"][path]["post"]["requestBody"] = _json_body(schema)
    return document


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


class ThreadedProxy:
    """The proxy served from a thread of its own, for synchronous callers (schemathesis)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.url = ""
        self._started = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with ProxyServer(self.app) as server:
            self.url = server.url
            self._started.set()
            await self._stop.wait()

    def __enter__(self) -> ThreadedProxy:
        self._thread.start()
        if not self._started.wait(60):
            msg = "the proxy thread did not start"
            raise RuntimeError(msg)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def threaded_proxy(renderer: ChatRenderer) -> Iterator[ThreadedProxy]:
    """A proxy with room for every session this module starts."""
    reply_ids = renderer.tokenizer.encode("Fuzzed.", add_special_tokens=False)
    engine = HeldEngine(reply_ids, renderer.end_of_turn_ids[-1])
    config = proxy_config(LimitsConfig(capacity=100_000))
    app = create_app(engine, renderer, config, admin_key=TEST_ADMIN_KEY)
    with ThreadedProxy(app) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def schema(threaded_proxy: ThreadedProxy) -> Any:
    return schemathesis.openapi.from_dict(openapi_document(threaded_proxy.app.openapi()))


@pytest.mark.parametrize(
    ("method", "path", "mode"),
    [pytest.param(*case, id=f"{case[0]} {case[1]} {case[2].value}") for case in FUZZ_CASES],
)
@pytest.mark.slow
def test_schemathesis_finds_no_5xx(
    threaded_proxy: ThreadedProxy, schema: Any, method: str, path: str, mode: Any
) -> None:
    url = threaded_proxy.url
    admin = {"authorization": f"Bearer {TEST_ADMIN_KEY}"}
    with requests.Session() as http:

        def key_headers() -> dict[str, str]:
            if path in OPEN_ROUTES:
                return {}
            if path in ADMIN_ROUTES:
                return admin
            started = http.post(f"{url}/rl/start_session", json={}, headers=admin, timeout=30)
            started.raise_for_status()
            return {"authorization": f"Bearer {started.json()['api_key']}"}

        @hypothesis.settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(hypothesis.HealthCheck),
            phases=[hypothesis.Phase.generate],  # a failure is reported as found, not shrunk
        )
        @hypothesis.given(case=schema[path][method].as_strategy(generation_mode=mode))
        def check(case: Any) -> None:
            response = case.call(base_url=url, session=http, headers=key_headers(), timeout=30)
            assert response.status_code < 500, (case.body, response.text[:500])
            if response.status_code >= 400:
                assert_envelope(path, response.json(), response.status_code)

        check()


# --- handcrafted --------------------------------------------------------------------------


def raw(path: str, messages_json: str, **fields: Any) -> bytes:
    """A body for `path` whose conversation is `messages_json`, spliced in as raw JSON text."""
    field = "input" if path.endswith("/responses") else "messages"
    tokens = "max_output_tokens" if path.endswith("/responses") else "max_tokens"
    head = json.dumps({"model": "instant", tokens: 8, **fields})[:-1]
    return f'{head}, "{field}": {messages_json}}}'.encode()


def user(content_json: str) -> str:
    return '[{"role": "user", "content": ' + content_json + "}]"


def hi_with(path: str, name: str, literal: str) -> bytes:
    """A plain request whose field `name` is the JSON text `literal` (NaN, 1e999, ...)."""
    return raw(path, user('"hi"'), **{name: "@"}).replace(b'"@"', literal.encode())


def many_messages(path: str) -> bytes:
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
        for i in range(10_001)
    ]
    return raw(path, json.dumps(turns))


def tool_round(path: str, arguments: str) -> bytes:
    """A conversation whose assistant called a tool with `arguments` (a string, as sent)."""
    done = "done"
    if path == "/v1/responses":
        items: list[Any] = [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments},
            {"type": "function_call_output", "call_id": "c1", "output": done},
        ]
    elif path == "/v1/messages":
        use = {"type": "tool_use", "id": "t1", "name": "f", "input": arguments}
        result = {"type": "tool_result", "tool_use_id": "t1", "content": done}
        items = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ]
    else:
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
        items = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": done},
        ]
    return raw(path, json.dumps(items))


def duplicate(path: str, *, last_wrong: bool) -> bytes:
    """The conversation key twice: a JSON object keeps the last one, as orjson does."""
    body = raw(path, user('"hi"'))
    field = b"input" if path.endswith("/responses") else b"messages"
    if last_wrong:
        return body[:-1] + b', "' + field + b'": 5}'
    return b'{"' + field + b'": 5, ' + body[1:]


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


HUGE = "1" + "0" * 400  # parses as a double: infinity


def generation_cases(path: str) -> list[tuple[str, bytes, int]]:
    tokens = "max_output_tokens" if path.endswith("/responses") else "max_tokens"
    latin_1 = raw(path, user('"caf\\u00e9"')).replace(b"\\u00e9", b"\xe9")
    ignored = user('[{"type": "text", "text": "x", "meta": ' + nested(200) + "}]")
    return [
        ("10000-messages", many_messages(path), 400),  # over the context, found fast
        ("nested-5000", raw(path, user(nested(5000))), 400),  # over the JSON parser's limit
        ("nested-900", raw(path, user(nested(900))), 400),  # over the proxy's limit (128)
        ("nested-in-an-ignored-field", raw(path, ignored), 400),
        ("latin-1-byte", latin_1, 400),
        ("trailing-invalid-utf8", raw(path, user('"a"')) + b"\xff", 400),
        ("lone-surrogate", raw(path, user('"\\ud800 alone"')), 400),
        ("temperature-nan", hi_with(path, "temperature", "NaN"), 400),
        ("temperature-infinite", hi_with(path, "temperature", "1e999"), 400),
        ("top-p-minus-infinity", hi_with(path, "top_p", "-Infinity"), 400),
        ("max-tokens-400-digits", hi_with(path, tokens, HUGE), 400),
        # Cut to the context left (the prompt fits), as a max_tokens of 64000 is: a reply.
        ("max-tokens-2**63", hi_with(path, tokens, str(2**63)), 200),
        ("max-tokens-minus-2**63", hi_with(path, tokens, str(-(2**63))), 400),
        ("duplicate-key-last-wrong", duplicate(path, last_wrong=True), 400),
        ("duplicate-key-last-right", duplicate(path, last_wrong=False), 200),
    ]


CHAT, RESPONSES, MESSAGES = GENERATION_PATHS
EXPORT = "/export_trajectories"
OTHER_CASES: list[tuple[str, str, bytes, int]] = [
    # Arguments are the model's own text sent back: accepted as they are, never parsed.
    ("chat-tool-arguments-not-json", CHAT, tool_round(CHAT, "{not json"), 200),
    ("chat-tool-arguments-nan", CHAT, tool_round(CHAT, '{"a": NaN}'), 200),
    ("chat-tool-arguments-nested-200", CHAT, tool_round(CHAT, nested(200)), 200),
    ("chat-tool-arguments-nested-600", CHAT, tool_round(CHAT, nested(600)), 200),
    ("responses-tool-arguments-not-json", RESPONSES, tool_round(RESPONSES, "{not json"), 200),
    # Anthropic's tool input is an object on the wire: a string is the client's mistake.
    ("messages-tool-input-a-string", MESSAGES, tool_round(MESSAGES, "{not json"), 400),
    ("reward-400-digits", "/rl/set_reward", b'{"reward": ' + HUGE.encode() + b"}", 400),
    ("reward-duplicate-last-wrong", "/rl/set_reward", b'{"reward": 1.0, "reward": "x"}', 400),
    ("version-over-int32", "/rl/set_version", b'{"version": 2147483648}', 400),
    ("version-2**62", "/rl/set_version", json.dumps({"version": 2**62}).encode(), 400),
    ("export-wait-infinite", EXPORT, b'{"session_id": "x", "wait_timeout": 1e999}', 400),
    ("export-discount-minus-infinity", EXPORT, b'{"session_id": "x", "discount": -Infinity}', 400),
]  # fmt: skip
HANDCRAFTED = [
    *[
        pytest.param(path, body, status, id=f"{path.rsplit('/', 1)[-1]}-{name}")
        for path in GENERATION_PATHS
        for name, body, status in generation_cases(path)
    ],
    *[pytest.param(path, body, status, id=name) for name, path, body, status in OTHER_CASES],
]


@pytest.mark.parametrize(("path", "body", "status"), HANDCRAFTED)
def test_a_hostile_body_is_refused_in_the_apis_error_format(
    threaded_proxy: ThreadedProxy, path: str, body: bytes, status: int
) -> None:
    url = threaded_proxy.url
    admin = {"authorization": f"Bearer {TEST_ADMIN_KEY}", "content-type": "application/json"}
    headers, session_id = admin, ""
    if path not in ADMIN_ROUTES:
        started = requests.post(f"{url}/rl/start_session", json={}, headers=admin, timeout=30)
        session_id = started.json()["session_id"]
        headers = {**admin, "authorization": f"Bearer {started.json()['api_key']}"}
        if path == "/rl/set_reward":
            call = {"model": "instant", "messages": [{"role": "user", "content": "hi"}]}
            requests.post(f"{url}/v1/chat/completions", json=call, headers=headers, timeout=30)
    response = requests.post(f"{url}{path}", data=body, headers=headers, timeout=60)
    assert response.status_code == status, response.text[:500]
    if status >= 400:
        assert_error(path, response, status)
    elif path in GENERATION_PATHS:  # what was accepted is recorded and exported too
        ended = requests.post(f"{url}/rl/end_session", headers=headers, timeout=30)
        assert ended.status_code == 200, ended.text
        export = requests.post(
            f"{url}/export_trajectories", json={"session_id": session_id}, headers=admin, timeout=30
        )
        assert export.status_code == 200, export.text[:500]
        assert len(export.json()["interactions"]) == 1


async def test_a_body_nested_just_under_the_limit_goes_through_a_whole_lifecycle(
    proxy: RunningProxy,
) -> None:
    # 120 levels inside a tool's input: accepted, recorded, and exported (serialised again).
    deep: Any = {"leaf": True}
    for _ in range(58):
        deep = {"a": [deep]}
    session_id, key = await proxy.start_session()
    body = json.loads(tool_round("/v1/messages", "x"))
    body["messages"][1]["content"][0]["input"] = deep
    response = await proxy.session_post(key, "/v1/messages", body)
    assert response.status_code == 200, response.text
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = await proxy.export(session_id)
    (item,) = export["interactions"]
    assert json.loads(item["messages"][1]["tool_calls"][0]["function"]["arguments"]) == deep
