"""Pure ASGI middleware in front of every route: the request body limit and per-route metrics."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rltap.proxy.errors import error_response
from rltap.proxy.metrics import ProxyMetrics
from rltap.proxy.requests import body_over_limit, declared_over_limit

__all__ = ["STARTED", "BodyLimitMiddleware", "MetricsMiddleware"]

# The ASGI scope key under which the metrics middleware keeps when a request arrived.
STARTED = "rltap.started"


class BodyLimitMiddleware:
    """Refuse bodies over `max_body_bytes` with 413, by Content-Length or by counting."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        if declared_over_limit(scope["headers"], limit):
            response = error_response(scope["path"], body_over_limit(limit))
            await response(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise body_over_limit(limit)
            return message

        await self.app(scope, limited_receive, send)


class MetricsMiddleware:
    """Count requests by route and status and time them (streams: until the last byte).

    A request is labelled by the route template it matched (`/v1/responses/{response_id}`),
    never by its raw path; paths that are no route of the app count as "other". Either way a
    scan cannot grow the labels.
    """

    def __init__(self, app: ASGIApp, metrics: ProxyMetrics, routes: Iterable[str]) -> None:
        self.app = app
        self.metrics = metrics
        paths = list(dict.fromkeys(routes))
        self.routes = frozenset(route for route in paths if "{" not in route)
        self.templates: list[tuple[re.Pattern[str], str]] = [
            (compile_path(route)[0], route) for route in paths if "{" in route
        ]

    def route_label(self, path: str) -> str:
        """The route template `path` matches (exact routes first, as the router tries), or
        "other"."""
        if path in self.routes:
            return path
        return next((route for regex, route in self.templates if regex.match(path)), "other")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = scope[STARTED] = time.perf_counter()
        status = 500

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            route = self.route_label(scope["path"])
            self.metrics.observe_request(route, status, time.perf_counter() - started)
