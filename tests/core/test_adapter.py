from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from rltap.adapter import (
    APIS,
    AgentAdapter,
    Connection,
    FrameworkVersionError,
    check_api,
    check_framework,
    rltap_error_from,
)
from rltap.record import errors
from rltap.testing.adapter_suite import STANDARD_TESTS, AdapterStandardTests


class _Echo(AgentAdapter):
    requirement = "openai>=1.0"

    async def _run(self, data: Any, connection: Connection, **kwargs: Any) -> Any:
        if data == "boom":
            request = httpx.Request("POST", "http://proxy/v1/chat/completions")
            response = httpx.Response(502, request=request, json={"error": {"message": "engine"}})
            try:
                raise openai.InternalServerError("engine down", response=response, body=None)
            except openai.InternalServerError as exc:
                raise RuntimeError("the framework wrapped it") from exc
        return f"{connection.base_url} {connection.api_key} {data}"


def test_a_framework_outside_the_range_fails_with_both_versions() -> None:
    with pytest.raises(FrameworkVersionError, match=r"openai \S+ is installed.*openai<1"):
        check_framework("openai<1")
    with pytest.raises(FrameworkVersionError, match="not installed"):
        check_framework("no-such-framework-xyz>=1")


async def test_run_uses_the_injected_connection_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = _Echo()
    assert await agent.run("q", base_url="http://a/v1", api_key="k1") == "http://a/v1 k1 q"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k2")
    assert await agent.run("q") == "http://env/v1 k2 q"
    assert Connection.resolve("http://env/v1", "k", None).root_url == "http://env"


async def test_no_connection_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(errors.InvalidRequest, match="OPENAI_BASE_URL"):
        await _Echo().run("q")


async def test_a_wrapped_engine_error_surfaces_as_rltap_error() -> None:
    with pytest.raises(errors.EngineError, match="502"):
        await _Echo().run("boom", base_url="http://a/v1", api_key="k")


async def test_reward_fn_turns_the_result_into_the_reward() -> None:
    agent = _Echo(reward_fn=lambda result, data: float(data in result))
    assert await agent.run("q", base_url="http://a/v1", api_key="k") == 1.0


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        pytest.param(410, errors.SessionGone, id="410"),
        pytest.param(503, errors.EngineUnavailable, id="503"),
        pytest.param(504, errors.EngineTimeout, id="504"),
        pytest.param(418, errors.InvalidRequest, id="other-4xx"),
        pytest.param(599, errors.EngineError, id="other-5xx"),
    ],
)
def test_status_codes_map_to_rltap_errors(status: int, kind: type[errors.RltapError]) -> None:
    request = httpx.Request("POST", "http://proxy/v1/messages")
    error = openai.APIStatusError("x", response=httpx.Response(status, request=request), body=None)
    assert type(rltap_error_from(error)) is kind
    assert rltap_error_from(ValueError("no http here")) is None


class _StreamedError(Exception):
    """What an SDK raises for an SSE error event: a body, no status."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body.get("message"))
        self.body = body


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        pytest.param({"type": "api_error", "code": "engine_error"}, errors.EngineError, id="502"),
        pytest.param(
            {"type": "timeout_error", "code": "engine_timeout"}, errors.EngineTimeout, id="504"
        ),
        pytest.param(
            {"type": "invalid_request_error", "code": None}, errors.InvalidRequest, id="400"
        ),
    ],
)
def test_streamed_error_events_map_to_rltap_errors(
    body: dict[str, Any], kind: type[errors.RltapError]
) -> None:
    wrapped = RuntimeError("the framework wrapped it")
    wrapped.__cause__ = _StreamedError({**body, "message": "boom"})
    assert type(rltap_error_from(wrapped)) is kind


def test_api_names_the_two_wire_formats() -> None:
    assert [check_api(api) for api in APIS] == ["chat", "responses"]
    with pytest.raises(ValueError, match="api must be one of chat, responses, got 'completions'"):
        check_api("completions")


def test_the_override_guard_covers_every_test_of_the_suite() -> None:
    declared = {name for name in dir(AdapterStandardTests) if name.startswith("test_")}
    assert set(STANDARD_TESTS) == declared
    assert "test_no_overrides" in STANDARD_TESTS


@pytest.mark.parametrize("name", STANDARD_TESTS)
@pytest.mark.parametrize(
    "replacement",
    [pytest.param(lambda self: None, id="overridden"), pytest.param(None, id="deleted")],
)
def test_changing_a_standard_test_fails_the_guard(name: str, replacement: Any) -> None:
    changed = type("_Changed", (AdapterStandardTests,), {name: replacement})
    with pytest.raises(AssertionError, match=f"overrides or deletes the standard test {name}"):
        AdapterStandardTests.test_no_overrides(changed())


def test_the_openai_sdk_s_streamed_error_event_maps_to_rltap_error() -> None:
    # What openai raises for an SSE error event: an APIError carrying the event's error body.
    request = httpx.Request("POST", "http://proxy/v1/chat/completions")
    body = {"message": "the engine fell over", "type": "api_error", "code": "engine_error"}
    streamed = openai.APIError("the engine fell over", request, body=body)
    mapped = rltap_error_from(streamed)
    assert type(mapped) is errors.EngineError
    assert "the engine fell over" in str(mapped)
