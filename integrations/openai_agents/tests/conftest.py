"""A real rltap proxy (uvicorn on 127.0.0.1) in front of the scripted engine and the tiny model.

The engine runs `rltap.testing.scripts.tool_loop` unless a test names another script: a real tool
call on the first turn when tools are offered, then `Final answer: <tool result>`. The proxies
come from `rltap.testing.harness`, which the standard suite and the matrix use too (one tiny
model per process).
"""

from __future__ import annotations

import torch

# `proxy`, `make_proxy`, and no vendor key, address or tracing switch in the environment.
pytest_plugins = ["rltap.testing.fixtures"]

# Two shared cores: one torch thread is faster than two, and leaves a core to the others.
torch.set_num_threads(1)
