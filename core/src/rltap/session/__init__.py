"""One agent episode behind every wire API, shared by the proxy and the direct client.

    session         Session: cache + engine + renderer; `stream(request)` is the one generation
    engine_request  the engine's `ModelRequest` for one call, under the session's `ChatConfig`
    exchange        a parsed body answered as the API's JSON body or SSE bytes
    json_body       a request body as a JSON object, refused clearly otherwise (400)
    interleave      the choices of an n > 1 call as one stream

Names are imported on first use: `rltap.session.json_body` does not load the renderer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltap._lazy import lazy_getattr

if TYPE_CHECKING:
    from rltap.session.session import Session

__all__ = ["Session"]

__getattr__ = lazy_getattr(
    "rltap.session", globals(), dict.fromkeys(__all__, "rltap.session.session")
)
