"""Engines and engine servers that answer without a model, for tests and benchmarks.

- `InstantEngine` (`instant`): an in-process engine with a fixed reply, at once.
- `FakeVLLM` (`vllm`): a vLLM-compatible HTTP server with a fixed reply; with the development
  API rltap's weight sync drives, and runtime LoRA adapters, when asked. Also a process of its
  own: `python -m rltap.testing.fakes.vllm --port 8100`.
- `FakeSGLang` (`sglang`): SGLang's native `/generate` API, tokens known up front
  (`expected_output`), aborts and stream options as SGLang has them.
- `MisbehavingVLLM` (`misbehaving_vllm`): a vLLM-compatible server that fails on purpose, as the
  request's `max_tokens` (`Fault`) asks: an error status, silence, a cut connection, a trickle.

The HTTP fakes serve on a free 127.0.0.1 port of this process (`async with ... as server:
server.url`); they need the `server` extra (aiohttp), which `testing` installs.
"""

from __future__ import annotations

from rltap.testing.fakes.instant import InstantEngine
from rltap.testing.fakes.misbehaving_vllm import Fault, MisbehavingVLLM
from rltap.testing.fakes.sglang import FakeSGLang, expected_output
from rltap.testing.fakes.vllm import FakeVLLM

__all__ = [
    "FakeSGLang",
    "FakeVLLM",
    "Fault",
    "InstantEngine",
    "MisbehavingVLLM",
    "expected_output",
]
