"""A store that cannot write: the call's reply is a 503 in the API's own error format (never a
reply the store did not record), and the proxy goes on."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from rltap.chat.renderer import ChatRenderer
from rltap.engines.scripted import ScriptedEngine
from rltap.proxy.state import ProxyConfig
from rltap.testing.proxy import TEST_ADMIN_KEY, start_test_proxy
from rltap.testing.scripts import echo

_BODY = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}]}


async def test_a_store_write_failure_is_a_503_in_the_apis_format(
    tiny_model: Any, renderer: ChatRenderer, tmp_path: Path
) -> None:
    store = tmp_path / "capture.sqlite"
    engine = ScriptedEngine(echo, tiny_model, tokenizer=renderer.tokenizer)
    config = ProxyConfig(admin_key=TEST_ADMIN_KEY, model_name="tiny", store_path=store)
    async with start_test_proxy(engine, renderer, config) as proxy:
        _, key = await proxy.start_session()
        assert (await proxy.session_post(key, "/v1/chat/completions", _BODY)).status_code == 200
        with sqlite3.connect(store) as conn:  # the store broken under the proxy
            conn.execute("ALTER TABLE interactions RENAME TO gone")
        for stream in (False, True):
            body = {**_BODY, "stream": stream}
            reply = await proxy.session_post(key, "/v1/chat/completions", body)
            if not stream:
                assert reply.status_code == 503
                error = reply.json()["error"]
                assert error["code"] == "store_unavailable"
                assert "failed to write" in error["message"]
            else:  # the stream's error event, then its end; no finished reply
                assert '"code":"store_unavailable"' in reply.text.replace(" ", "")
                assert reply.text.rstrip().endswith("data: [DONE]")
        with sqlite3.connect(store) as conn:
            conn.execute("ALTER TABLE gone RENAME TO interactions")
        assert (await proxy.session_post(key, "/v1/chat/completions", _BODY)).status_code == 200
