"""The two clients of a session: in process and over HTTP.

    direct  DirectOpenAI: an `openai.AsyncOpenAI` bound to an engine, no server in between
    proxy   OpenAIProxyClient: the proxy's control routes (sessions, rewards, export)

Names are imported on first use, so `from rltap.client import OpenAIProxyClient` needs only the
slim install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltap._lazy import lazy_getattr

if TYPE_CHECKING:
    from rltap.client.direct import RLTAP_ERROR, DirectOpenAI, DirectTransport
    from rltap.client.proxy import (
        OpenAIProxyClient,
        Reply,
        interactions_from_export,
        tree_from_export,
    )

__all__ = [
    "RLTAP_ERROR",
    "DirectOpenAI",
    "DirectTransport",
    "OpenAIProxyClient",
    "Reply",
    "interactions_from_export",
    "tree_from_export",
]

__getattr__ = lazy_getattr(
    "rltap.client",
    globals(),
    {
        **dict.fromkeys(("RLTAP_ERROR", "DirectOpenAI", "DirectTransport"), "rltap.client.direct"),
        **dict.fromkeys(
            ("OpenAIProxyClient", "Reply", "interactions_from_export", "tree_from_export"),
            "rltap.client.proxy",
        ),
    },
)
