"""One engine over several servers (`rltap.engines.router.EngineRouter`), over real HTTP: each
server is a `FakeVLLM` on 127.0.0.1 (fixed replies; a delay per call, a failing `/health`, a
crash and a restart on the same port when a test asks).

A session sticks to the engine of its first call; a new session goes to the engine with the
fewest requests in flight, then the fewest sessions; an engine failing its health check gets no
call and comes back once healthy; a weight sync reaches every engine, saves the folder once and
moves the router's version once; a sync failing on one engine names it and keeps the version;
an address that does not answer at start is refused with its address.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rltap.config.flags import ConfigError
from rltap.engines.base import WeightFolder
from rltap.engines.factory import create_engine
from rltap.engines.router import EngineRouter
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import EngineError, EngineUnavailable, InvalidRequest
from rltap.record.types import ModelRequest
from rltap.testing.fakes import FakeVLLM

PROMPT = [9707, 11, 1879]


def request(session: str | None, max_tokens: int = 4) -> ModelRequest:
    return ModelRequest(input_ids=PROMPT, max_new_tokens=max_tokens, session_id=session)


@contextlib.asynccontextmanager
async def servers(count: int, **options: object) -> AsyncIterator[list[FakeVLLM]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(FakeVLLM(**options)) for _ in range(count)]  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def router_over(fakes: list[FakeVLLM], **options: float) -> AsyncIterator[EngineRouter]:
    router = EngineRouter([VLLMEngine(fake.url) for fake in fakes], **options)  # type: ignore[arg-type]
    await router.start()
    try:
        yield router
    finally:
        await router.close()


def served(fakes: list[FakeVLLM]) -> list[int]:
    return [fake.completions for fake in fakes]


def dead_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_session_sticks_to_its_engine_and_new_sessions_spread_evenly() -> None:
    async with servers(3) as fakes, router_over(fakes) as router:
        for session in range(9):
            await router.generate(request(f"s{session}"))
        assert served(fakes) == [3, 3, 3]
        first = router.engine_of("s0")
        assert first is not None
        for _ in range(4):
            async with contextlib.aclosing(router.stream(request("s0"))) as chunks:
                assert [chunk async for chunk in chunks]
        assert router.engine_of("s0") == first
        index = [fake.url for fake in fakes].index(first)
        assert served(fakes)[index] == 7
        assert sorted(load.sessions for load in router.loads()) == [3, 3, 3]


async def test_a_new_session_goes_to_the_engine_with_fewest_requests_in_flight() -> None:
    async with servers(2) as fakes, router_over(fakes) as router:
        fakes[0].delay = fakes[1].delay = 0.5
        busy = asyncio.create_task(router.generate(request("long")))
        await asyncio.sleep(0.1)
        busy_engine = router.engine_of("long")
        assert busy_engine is not None
        fakes[0].delay = fakes[1].delay = 0.0
        await router.generate(request("new"))
        assert router.engine_of("new") != busy_engine
        loads = {load.address: load.in_flight for load in router.loads()}
        assert loads[busy_engine] == 1
        await busy


async def test_an_ended_session_leaves_the_map_and_its_engine_count() -> None:
    async with servers(2) as fakes, router_over(fakes, max_sessions=2) as router:
        for session in ("a", "b", "c"):
            await router.generate(request(session))
        assert router.engine_of("a") is None  # the least recently used, past the bound
        assert sum(load.sessions for load in router.loads()) == 2
        router.end_session("b")
        assert router.engine_of("b") is None
        assert sum(load.sessions for load in router.loads()) == 1


async def test_an_engine_failing_its_health_check_is_out_until_healthy_again() -> None:
    async with servers(2) as fakes, router_over(fakes, health_interval=0.05) as router:
        await router.generate(request("s"))
        home = [fake.url for fake in fakes].index(router.engine_of("s") or "")
        other = 1 - home
        fakes[home].healthy = False
        await asyncio.sleep(0.3)
        assert [load.healthy for load in router.loads()][home] is False
        before = served(fakes)
        await router.generate(request("s"))  # the session moves
        await router.generate(request("fresh"))
        assert router.engine_of("s") == fakes[other].url
        assert router.engine_of("fresh") == fakes[other].url
        assert served(fakes)[home] == before[home]
        fakes[home].healthy = True
        await asyncio.sleep(0.3)
        assert all(load.healthy for load in router.loads())
        await router.generate(request("later"))
        assert router.engine_of("later") == fakes[home].url  # fewer sessions there now


async def test_no_healthy_engine_is_a_503_for_every_call() -> None:
    async with servers(2) as fakes, router_over(fakes, health_interval=0.05) as router:
        for fake in fakes:
            fake.healthy = False
        await asyncio.sleep(0.3)
        with pytest.raises(EngineUnavailable, match="no engine is healthy") as caught:
            await router.generate(request("s"))
        assert caught.value.status_code == 503


async def test_a_crash_mid_call_is_a_retryable_503_and_the_next_call_goes_elsewhere() -> None:
    async with servers(2) as fakes, router_over(fakes, health_interval=0.05) as router:
        await router.generate(request("s"))
        home = [fake.url for fake in fakes].index(router.engine_of("s") or "")
        fakes[home].delay = 5.0
        call = asyncio.create_task(router.generate(request("s")))
        await asyncio.sleep(0.2)
        await fakes[home].kill()
        with pytest.raises(EngineUnavailable) as caught:
            await call
        assert fakes[home].url in caught.value.message
        assert "out of rotation" in caught.value.message
        assert caught.value.is_retryable
        response = await router.generate(request("s"))
        assert response.output_tokens
        assert router.engine_of("s") == fakes[1 - home].url
        fakes[home].delay = 0.0
        await fakes[home].start()  # same port
        await asyncio.sleep(0.3)
        assert all(load.healthy for load in router.loads())


async def test_a_weight_sync_reaches_every_engine_saves_once_and_moves_the_version_once(
    tmp_path: Path,
) -> None:
    records = [tmp_path / f"calls{i}.jsonl" for i in range(2)]
    async with contextlib.AsyncExitStack() as stack:
        fakes = [await stack.enter_async_context(FakeVLLM(record=r)) for r in records]
        router = await stack.enter_async_context(router_over(fakes))
        saves: list[Path] = []

        def write(path: Path) -> None:
            path.mkdir(parents=True, exist_ok=True)
            (path / "model.safetensors").write_bytes(b"weights")

        async def save(path: Path) -> None:
            saves.append(path)
            await asyncio.to_thread(write, path)

        version = await router.update_weights(WeightFolder(tmp_path / "sync", save=save))
        assert version == 1
        assert [engine.version for engine in router.engines] == [1, 1]
        assert saves == [(tmp_path / "sync").resolve()]
        for record in records:
            lines = [json.loads(line) for line in record.read_text().splitlines()]
            bodies = {line["path"]: line["body"] for line in lines}
            assert bodies["/update_weight_version"] == {"new_version": "1"}
            assert bodies["/collective_rpc"]["kwargs"]["weights_path"] == str(saves[0])
        response = await router.generate(request("s"))
        assert set(response.output_versions) == {1}
        assert await router.update_weights(WeightFolder(tmp_path / "sync"), version=7) == 7
        assert router.version == 7


async def test_a_sync_failing_on_one_engine_names_it_and_keeps_the_version(
    tmp_path: Path,
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        good = await stack.enter_async_context(FakeVLLM(record=tmp_path / "calls.jsonl"))
        no_dev_api = await stack.enter_async_context(FakeVLLM())
        router = await stack.enter_async_context(router_over([good, no_dev_api]))
        folder = tmp_path / "sync"
        folder.mkdir()
        with pytest.raises(EngineError) as caught:
            await router.update_weights(WeightFolder(folder), version=3)
        message = caught.value.message
        assert no_dev_api.url in message
        assert "VLLM_SERVER_DEV_MODE=1" in message
        assert f"{good.url} serve version 3" in message
        assert "router's version stays 0" in message
        assert router.version == 0
        assert [engine.version for engine in router.engines] == [3, 0]


async def test_a_dead_address_at_start_is_refused_with_its_address() -> None:
    dead = dead_address()
    async with FakeVLLM() as fake:
        engine = create_engine("vllm", url=f"{fake.url}, {dead}")
        assert isinstance(engine, EngineRouter)
        with pytest.raises(EngineUnavailable, match="not answering at start") as caught:
            await engine.start()
        await engine.close()
    assert dead in caught.value.message
    assert fake.url not in caught.value.message


def test_one_address_is_the_plain_engine_and_a_repeated_one_is_refused() -> None:
    assert isinstance(create_engine("vllm", url=" http://127.0.0.1:1 ,"), VLLMEngine)
    with pytest.raises(ConfigError, match="twice"):
        create_engine("vllm", url="http://127.0.0.1:1,http://127.0.0.1:1/v1/")
    with pytest.raises(ConfigError, match="needs --url"):
        create_engine("vllm", url=" , ")
    router = create_engine("sglang", url="http://127.0.0.1:1,http://127.0.0.1:2")
    assert isinstance(router, EngineRouter)
    assert [engine.url for engine in router.engines] == ["http://127.0.0.1:1", "http://127.0.0.1:2"]


async def test_a_source_no_engine_takes_is_the_engines_own_refusal() -> None:
    async with servers(2) as fakes, router_over(fakes) as router:
        assert router.takes_named_tensors is False  # folder-reloading servers
        with pytest.raises(InvalidRequest, match="WeightFolder"):
            await router.update_weights({}, version=2)
        assert router.version == 0


async def test_servers_of_different_models_are_refused_at_start() -> None:
    async with servers(2) as fakes:
        router = EngineRouter([VLLMEngine(fakes[0].url), VLLMEngine(fakes[1].url, model="other")])
        with pytest.raises(EngineError, match="different models") as caught:
            await router.start()
    assert f"{fakes[0].url}: fake" in caught.value.message
    assert f"{fakes[1].url}: other" in caught.value.message
