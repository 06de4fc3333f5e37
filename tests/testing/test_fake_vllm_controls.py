"""The fake vLLM server as a slow or failing engine (what the router's tests and
bench/engine_router.py drive): a delay serves one completion at a time, `/health` fails while
told to (an attribute in process, a file for the process of its own), and it counts its
completions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from process_testing import fake_vllm_process

from rltap.testing.fakes import FakeVLLM

BODY = {"model": "fake", "prompt": [9707, 11], "max_tokens": 2}


async def test_a_delay_serves_one_completion_at_a_time_and_health_follows_the_flag() -> None:
    async with FakeVLLM(delay=0.1) as fake, httpx.AsyncClient() as http:
        started = time.perf_counter()
        replies = await asyncio.gather(
            *(http.post(f"{fake.url}/v1/completions", json=BODY) for _ in range(3))
        )
        assert time.perf_counter() - started >= 0.3
        assert [reply.status_code for reply in replies] == [200, 200, 200]
        assert fake.completions == 3
        fake.healthy = False
        assert (await http.get(f"{fake.url}/health")).status_code == 503
        fake.healthy = True
        assert (await http.get(f"{fake.url}/health")).status_code == 200


@pytest.fixture
def slow_fake_process(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    flag = tmp_path / "unhealthy"
    with fake_vllm_process("--delay", "0.1", "--health-file", str(flag)) as url:
        yield url, flag


async def test_the_process_takes_a_delay_and_a_health_file(
    slow_fake_process: tuple[str, Path],
) -> None:
    url, flag = slow_fake_process
    async with httpx.AsyncClient() as http:
        started = time.perf_counter()
        replies = await asyncio.gather(
            *(http.post(f"{url}/v1/completions", json=BODY) for _ in range(2))
        )
        assert time.perf_counter() - started >= 0.2
        assert [reply.status_code for reply in replies] == [200, 200]
        flag.touch()
        assert (await http.get(f"{url}/health")).status_code == 503
        flag.unlink()
        assert (await http.get(f"{url}/health")).status_code == 200
