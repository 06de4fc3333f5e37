"""The one table that turns the HTTP client's exceptions into rltap errors."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from rltap.engines._http_errors import EXCEPTION_MAP, engine_error, mapping_for
from rltap.record.errors import EngineError, EngineTimeout, EngineUnavailable


def _client_exception_types() -> list[type[BaseException]]:
    """Every exception class aiohttp's client defines, and the others the client raises."""
    found: list[type[BaseException]] = []
    pending: list[type[BaseException]] = [aiohttp.ClientError]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub.__module__.startswith("aiohttp.") and sub not in found:
                found.append(sub)
                pending.append(sub)
    return [*found, asyncio.TimeoutError, orjson.JSONDecodeError]


@pytest.mark.parametrize("exc_type", _client_exception_types(), ids=lambda cls: cls.__name__)
def test_every_exception_the_client_can_raise_is_mapped(exc_type: type[BaseException]) -> None:
    mapping = mapping_for(exc_type)
    assert mapping is not None, f"{exc_type.__name__} has no entry in EXCEPTION_MAP"
    assert issubclass(mapping.error, EngineError)


def test_the_client_error_base_is_not_a_catch_all() -> None:
    # With it in the table, a new aiohttp exception would map silently, unclassified.
    assert aiohttp.ClientError not in EXCEPTION_MAP


@pytest.mark.parametrize(
    ("exc_type", "error", "retryable"),
    [
        pytest.param(aiohttp.ConnectionTimeoutError, EngineUnavailable, True, id="connect-timeout"),
        pytest.param(aiohttp.ClientConnectorDNSError, EngineUnavailable, True, id="dns"),
        pytest.param(aiohttp.SocketTimeoutError, EngineTimeout, True, id="read-timeout"),
        pytest.param(asyncio.TimeoutError, EngineTimeout, True, id="timeout"),
        pytest.param(aiohttp.ServerDisconnectedError, EngineError, True, id="disconnected"),
        pytest.param(aiohttp.ClientPayloadError, EngineError, True, id="truncated-body"),
        pytest.param(aiohttp.ClientResponseError, EngineError, False, id="invalid-http"),
        pytest.param(aiohttp.ClientConnectorCertificateError, EngineError, False, id="tls"),
        pytest.param(aiohttp.NonHttpUrlClientError, EngineError, False, id="url"),
        pytest.param(orjson.JSONDecodeError, EngineError, False, id="json"),
    ],
)
def test_each_family_maps_to_its_error_and_retryability(
    exc_type: type[BaseException], error: type[EngineError], retryable: bool
) -> None:
    mapping = mapping_for(exc_type)
    assert mapping is not None
    assert (mapping.error, mapping.retryable) == (error, retryable)


def test_an_exception_maps_with_the_engine_and_url_in_its_message() -> None:
    mapped = engine_error("vLLM", "http://h:1/x", aiohttp.ServerDisconnectedError())
    assert type(mapped) is EngineError
    assert mapped.is_retryable
    assert mapped.message.startswith("vLLM at http://h:1/x dropped the connection: ")


def test_what_is_not_a_client_failure_is_not_mapped() -> None:
    assert engine_error("vLLM", "http://h:1", asyncio.CancelledError()) is None
    assert engine_error("vLLM", "http://h:1", KeyError("x")) is None
    already = EngineUnavailable("down")
    assert engine_error("vLLM", "http://h:1", already) is already
