"""The HTTP proxy: the app, its server, its sessions, and the client of its control routes.

Code outside this package uses these names from `rltap.proxy` itself, never its modules; and
only the entry points above the proxy do (the CLI, rollouts, the demo, workflows, the testing
helpers): the session, the protocols, the engines and the direct client never import it.
Names are imported on first use, so `from rltap.proxy import OpenAIProxyClient` does not load
the server stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltap._lazy import lazy_getattr

if TYPE_CHECKING:
    from rltap.client.proxy import (
        OpenAIProxyClient,
        Reply,
        interactions_from_export,
        tree_from_export,
    )
    from rltap.proxy.app import create_app
    from rltap.proxy.errors import install_error_handlers
    from rltap.proxy.server import ProxyServer, ServeSetup, run_serve
    from rltap.proxy.state import ProxyState

__all__ = [
    "OpenAIProxyClient",
    "ProxyServer",
    "ProxyState",
    "Reply",
    "ServeSetup",
    "create_app",
    "install_error_handlers",
    "interactions_from_export",
    "run_serve",
    "tree_from_export",
]

_LAZY = {
    "OpenAIProxyClient": "rltap.client.proxy",
    "ProxyServer": "rltap.proxy.server",
    "ProxyState": "rltap.proxy.state",
    "Reply": "rltap.client.proxy",
    "ServeSetup": "rltap.proxy.server",
    "create_app": "rltap.proxy.app",
    "install_error_handlers": "rltap.proxy.errors",
    "interactions_from_export": "rltap.client.proxy",
    "run_serve": "rltap.proxy.server",
    "tree_from_export": "rltap.client.proxy",
}

__getattr__ = lazy_getattr("rltap.proxy", globals(), _LAZY)
