"""rltap.testing.fakes: the engine fakes users and benchmarks import, in one package; the fake
vLLM server also runs as a process of its own (`python -m rltap.testing.fakes.vllm`), as the
benchmarks and the Ray tests start it."""

from __future__ import annotations

import subprocess
import sys

import httpx
from process_testing import fake_vllm_process

import rltap.testing.fakes
from rltap.engines.sglang import SGLangEngine
from rltap.engines.vllm import VLLMEngine
from rltap.record.types import ModelRequest
from rltap.testing.fakes import FakeSGLang, FakeVLLM, InstantEngine, expected_output
from rltap.testing.fakes.vllm import REPLY_IDS

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


def test_the_package_exports_each_fake() -> None:
    assert sorted(rltap.testing.fakes.__all__) == [
        "FakeSGLang",
        "FakeVLLM",
        "Fault",
        "InstantEngine",
        "MisbehavingVLLM",
        "expected_output",
    ]


def test_the_instant_engine_needs_no_http_server_stack() -> None:
    probe = "import sys, rltap.testing.fakes as f; f.InstantEngine; print('aiohttp' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


async def test_the_instant_engine_replies_its_tokens_then_the_end_of_turn() -> None:
    engine = InstantEngine([11, 12], end_id=99)
    engine.set_version(3)
    response = await engine.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=8))
    assert response.output_tokens == [11, 12, 99]
    assert response.output_versions == [3, 3, 3]


async def test_the_fake_vllm_answers_rltaps_vllm_engine_with_its_fixed_reply() -> None:
    async with FakeVLLM() as server:
        engine = VLLMEngine(server.url)
        await engine.start()
        try:
            response = await engine.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=64))
        finally:
            await engine.close()
    assert response.input_tokens == PROMPT
    assert response.output_tokens == REPLY_IDS


async def test_the_fake_sglang_answers_rltaps_sglang_engine_with_the_tokens_it_promises() -> None:
    async with FakeSGLang() as server:
        engine = SGLangEngine(server.url)
        await engine.start()
        try:
            response = await engine.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=4))
        finally:
            await engine.close()
    assert response.output_tokens == expected_output(PROMPT, 4)[0]


def test_the_fake_vllm_runs_as_a_process_of_its_own() -> None:
    body = {"model": "fake", "prompt": PROMPT, "max_tokens": 3}
    # runpy warns when the package has loaded the module it is asked to run: an error here.
    with fake_vllm_process(python_flags=("-W", "error::RuntimeWarning")) as url:
        reply = httpx.post(f"{url}/v1/completions", json=body).json()
    (choice,) = reply["choices"]
    assert choice["prompt_token_ids"] == PROMPT
    assert choice["token_ids"] == REPLY_IDS[:3]
    assert choice["finish_reason"] == "length"
