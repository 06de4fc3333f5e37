"""use_vllm=True, vllm_mode="server": rltap's vLLM engine on the server in the trainer's args.

The server is rltap's fake vLLM (`rltap.testing.fakes.vllm`: vLLM's OpenAI routes, a fixed
reply), served on a loop of its own thread as a real server would be. The trainer is a real
GRPOTrainer whose args are then switched to server mode: constructing one with use_vllm needs
the vllm package, which TRL imports at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from conftest import repeated, server_args
from trl_agents import one_call_agent

from rltap.chat import TokenizerMismatch
from rltap.testing.fakes.vllm import REPLY_IDS, FakeVLLM
from rltap_trl import SESSION_FIELD, AgentRollout
from rltap_trl._loop import BackgroundLoop

ROWS = [{"question": "What is 2+3?", "answer": "5"}, {"question": "What is 4*5?", "answer": "20"}]


class TokenizingVLLM(FakeVLLM):
    """The fake with vLLM's `/tokenize`, answering with `tokenize(prompt)`."""

    def __init__(self, tokenize: Any) -> None:
        super().__init__()
        self.tokenize = tokenize

    def app(self) -> web.Application:
        app = super().app()

        async def tokenize(request: web.Request) -> web.Response:
            body = await request.json()
            tokens = self.tokenize(body["prompt"])
            return web.json_response({"tokens": tokens, "count": len(tokens)})

        app.router.add_post("/tokenize", tokenize)
        return app


def serve(fake: FakeVLLM) -> Iterator[FakeVLLM]:
    loop = BackgroundLoop("fake-vllm")
    loop.run(fake.start())
    try:
        yield fake
    finally:
        loop.run(fake.stop())
        loop.close()


@pytest.fixture
def vllm() -> Iterator[FakeVLLM]:
    yield from serve(FakeVLLM())


@pytest.fixture
def server_trainer(trainer: Any) -> Iterator[Any]:
    """The module's trainer with its args in server mode (the url set by each test). The
    fields are set in place: a new TrainingArguments resets accelerate's state."""
    with server_args(trainer.args, use_vllm=True, vllm_mode="server"):
        step = trainer.state.global_step
        yield trainer
        trainer.state.global_step = step


def test_server_mode_generates_on_the_server_at_the_trainers_step(
    server_trainer: Any, vllm: FakeVLLM, closing: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    server_trainer.args.vllm_server_base_url = vllm.url
    rollout = AgentRollout(one_call_agent())
    closing.append(rollout)
    for step in (3, 4):
        server_trainer.state.global_step = step
        with caplog.at_level(logging.WARNING, logger="rltap_trl"):
            output = rollout(repeated(ROWS), server_trainer)
        assert output["completion_ids"] == [REPLY_IDS] * 4
        assert output["env_mask"] == [[1] * len(REPLY_IDS)] * 4
        assert all(len(lp) == len(REPLY_IDS) for lp in output["logprobs"])
        assert len(set(output[SESSION_FIELD])) == 4
        # Every sampled token carries the step TRL synced the server's weights at.
        for branch in rollout.last_rows:
            assert branch is not None
            assert branch.sampled_versions == [step] * len(REPLY_IDS)
    assert vllm.completions == 8
    # The fake has no /tokenize: the check is skipped, and the log says so.
    assert "has no /tokenize: its tokenizer is not checked" in caplog.text


def test_a_server_with_the_trainers_tokenizer_passes_the_probe(
    server_trainer: Any, closing: list[Any]
) -> None:
    tokenizer = server_trainer.processing_class
    fake = TokenizingVLLM(lambda text: tokenizer.encode(text, add_special_tokens=False))
    for served in serve(fake):
        server_trainer.args.vllm_server_base_url = served.url
        rollout = AgentRollout(one_call_agent())
        closing.append(rollout)
        assert rollout(repeated(ROWS[:1]), server_trainer)["completion_ids"] == [REPLY_IDS] * 2


def test_a_server_with_another_tokenizer_is_refused(
    server_trainer: Any, closing: list[Any]
) -> None:
    tokenizer = server_trainer.processing_class
    fake = TokenizingVLLM(lambda text: [t + 1 for t in tokenizer.encode(text)])
    for served in serve(fake):
        server_trainer.args.vllm_server_base_url = served.url
        rollout = AgentRollout(one_call_agent())
        closing.append(rollout)
        with pytest.raises(TokenizerMismatch, match="tokenizes a probe text as"):
            rollout(repeated(ROWS[:1]), server_trainer)
        assert served.completions == 0
