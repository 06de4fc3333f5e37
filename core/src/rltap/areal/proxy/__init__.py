"""`areal.experimental.openai.proxy`: the trainer's side of the proxy, with AReaL's signatures."""

from __future__ import annotations

from rltap.areal.proxy.client_session import OpenAIProxyClient
from rltap.areal.proxy.workflow import DEFAULT_ADMIN_API_KEY, OpenAIProxyWorkflow

__all__ = ["DEFAULT_ADMIN_API_KEY", "OpenAIProxyClient", "OpenAIProxyWorkflow"]
