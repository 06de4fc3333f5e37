"""Engines and engine servers that answer without a model, for tests and benchmarks.

- `InstantEngine` (`instant`): an in-process engine with a fixed reply, at once.
- `FakeVLLM` (`vllm`): a vLLM-compatible HTTP server with a fixed reply; with the development
  API rltap's weight sync drives, runtime LoRA adapters, a time per call, a failing health
  check or a crash, when asked. Also a process of its
  own: `python -m rltap.testing.fakes.vllm --port 8100`.
- `FakeSGLang` (`sglang`): SGLang's native `/generate` API, tokens known up front
  (`expected_output`), aborts and stream options as SGLang has them.
- `MisbehavingVLLM` (`misbehaving_vllm`): a vLLM-compatible server that fails on purpose, as the
  request's `max_tokens` (`Fault`) asks: an error status, silence, a cut connection, a trickle.

The HTTP fakes serve on a free 127.0.0.1 port of this process (`async with ... as server:
server.url`); they need the `server` extra (aiohttp), which `testing` installs. Each name loads
its module on first use, so `InstantEngine` needs no aiohttp and `python -m
rltap.testing.fakes.vllm` does not find its module loaded already by this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltap._lazy import lazy_getattr

if TYPE_CHECKING:
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

_LAZY = {
    "FakeSGLang": "rltap.testing.fakes.sglang",
    "FakeVLLM": "rltap.testing.fakes.vllm",
    "Fault": "rltap.testing.fakes.misbehaving_vllm",
    "InstantEngine": "rltap.testing.fakes.instant",
    "MisbehavingVLLM": "rltap.testing.fakes.misbehaving_vllm",
    "expected_output": "rltap.testing.fakes.sglang",
}
__getattr__ = lazy_getattr("rltap.testing.fakes", globals(), _LAZY)
