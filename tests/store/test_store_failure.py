"""A store that fails to write stops: from the moment the proxy hears of it, every call is a 503
in the API's own error format, and nothing after the failure is recorded, even once the file
works again (its rows would be calls the client was refused); `/health` says why."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ServeConfig
from rltap.engines.scripted import ScriptedEngine
from rltap.testing.proxy import start_test_proxy
from rltap.testing.scripts import echo

_BODY = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}]}


async def test_a_store_write_failure_stops_the_store_and_calls_are_503_in_the_apis_format(
    tiny_model: Any, renderer: ChatRenderer, tmp_path: Path
) -> None:
    store = tmp_path / "capture.sqlite"
    engine = ScriptedEngine(echo, tiny_model, tokenizer=renderer.tokenizer)
    config = ServeConfig().with_store(str(store))
    async with start_test_proxy(engine, renderer, config) as proxy:
        _, key = await proxy.start_session()
        first = await proxy.session_post(key, "/v1/chat/completions", _BODY)
        assert first.status_code == 200
        capture = proxy.state.store.capture
        assert capture is not None
        await asyncio.to_thread(capture.flush)  # its row committed
        with sqlite3.connect(store) as conn:  # the store broken under the proxy
            conn.execute("ALTER TABLE interactions RENAME TO gone")
        # The next call's row fails in the writer; the proxy hears of it a burst later.
        deadline = time.monotonic() + 10
        while (reply := await proxy.session_post(key, "/v1/chat/completions", _BODY)).is_success:
            assert time.monotonic() < deadline, "the store's failure never reached the proxy"
            await asyncio.sleep(0.01)
        assert reply.status_code == 503
        error = reply.json()["error"]
        assert error["code"] == "store_unavailable"
        assert "failed to write: OperationalError: no such table: interactions" in error["message"]
        stream = await proxy.session_post(key, "/v1/chat/completions", {**_BODY, "stream": True})
        # The stream's error event, then its end; no finished reply.
        assert '"code":"store_unavailable"' in stream.text.replace(" ", "")
        assert stream.text.rstrip().endswith("data: [DONE]")
        with sqlite3.connect(store) as conn:
            conn.execute("ALTER TABLE gone RENAME TO interactions")
        again = await proxy.session_post(key, "/v1/chat/completions", _BODY)
        assert again.status_code == 503  # stopped until a proxy opens the store again
        health = await proxy.http.get(f"{proxy.url}/health")
        assert health.status_code == 503
        assert health.json()["status"] == "store_unavailable"
        assert "no such table: interactions" in health.json()["error"]
    with sqlite3.connect(store) as conn:
        stored = [row[0] for row in conn.execute("SELECT interaction_id FROM interactions")]
    assert stored == [first.json()["id"]]
