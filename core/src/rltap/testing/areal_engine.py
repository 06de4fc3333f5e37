"""A fake AReaL engine: AReaL's engine API (`agenerate`, `get_version`, `set_version`) replying
with scripted texts, for testing AReaL code on rltap without an inference server.

Usage:
    engine = ScriptedArealEngine(tokenizer, ["4", "done"])
    client = rltap.areal.ArealOpenAI(engine=engine, tokenizer=tokenizer)

Each call answers with the next text, tokenized by the real tokenizer and ended by its EOS token
(as AReaL's servers return it), within `gconfig.max_new_tokens`. The logprob of the i-th output
token of call n is `-(n + 1) / (i + 2)`: distinct values, so a test sees each one recorded
exactly where the engine produced it. `requests` keeps what the engine was sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rltap.areal.io_struct import ModelResponse

__all__ = ["ScriptedArealEngine"]


class ScriptedArealEngine:
    """Replies with `replies` in turn; `response_class` is the ModelResponse it builds (AReaL's
    own, where installed, or `rltap.areal.ModelResponse`)."""

    def __init__(
        self,
        tokenizer: Any,
        replies: Sequence[str],
        *,
        response_class: type[Any] = ModelResponse,
        version: int = 0,
    ) -> None:
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.response_class = response_class
        self.version = version
        self.requests: list[Any] = []

    def get_version(self) -> int:
        return self.version

    def set_version(self, version: int) -> None:
        self.version = version

    async def agenerate(self, req: Any) -> Any:
        call = len(self.requests)
        if call >= len(self.replies):
            msg = f"the script has {len(self.replies)} replies; call {call + 1} has none"
            raise RuntimeError(msg)
        self.requests.append(req)
        tokens = self.tokenizer.encode(self.replies[call], add_special_tokens=False)
        tokens.append(self.tokenizer.eos_token_id)
        limit = req.gconfig.max_new_tokens
        output = tokens[:limit]
        return self.response_class(
            input_tokens=list(req.input_ids),
            output_tokens=output,
            output_logprobs=[-(call + 1) / (i + 2) for i in range(len(output))],
            output_versions=[self.version] * len(output),
            stop_reason="stop" if len(output) == len(tokens) else "length",
            latency=0.001,
            # AReaL's engines set it: its client strips the stop token with it.
            tokenizer=self.tokenizer,
        )
