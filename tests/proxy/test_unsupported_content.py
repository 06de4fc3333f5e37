"""Content a text model cannot read is refused naming it, never dropped without a word.

Each API through its real client: an image, audio, file or document part is a 400 whose message
names the part's type and its path; a proxy with `drop_unsupported_content`
(`--drop-unsupported-content`) drops it and answers, recording the messages without it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from clients import anthropic_client, openai_client

from rltap.testing.proxy import RunningProxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]
IMAGE_URL = "data:image/png;base64,iVBORw0KGgo="
CHAT_CASES = [
    pytest.param(
        {"type": "image_url", "image_url": {"url": IMAGE_URL}}, "image_url", id="image_url"
    ),
    pytest.param(
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        "input_audio",
        id="input_audio",
    ),
    pytest.param({"type": "file", "file": {"file_id": "file-1"}}, "file", id="file"),
]
RESPONSES_CASES = [
    pytest.param({"type": "input_image", "image_url": IMAGE_URL}, "input_image", id="input_image"),
    pytest.param({"type": "input_file", "file_id": "file-1"}, "input_file", id="input_file"),
    pytest.param(
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        "input_audio",
        id="input_audio",
    ),
]
MESSAGES_CASES = [
    pytest.param(
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        "image",
        "",
        id="image",
    ),
    pytest.param(
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf"}},
        "document",
        ".source",
        id="pdf-document",
    ),
    pytest.param(
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
        "document",
        ".source",
        id="url-document",
    ),
]


@pytest.fixture
async def dropping(make_proxy: ProxyFactory) -> RunningProxy:
    return await make_proxy(chat_options={"drop_unsupported_content": True})


async def _recorded_messages(proxy: RunningProxy, key: str, session_id: str) -> list[Any]:
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = await proxy.export(session_id)
    return [item["messages"] for item in export["interactions"]]


def _chat_messages(part: dict[str, Any]) -> list[Any]:
    return [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, part]}]


@pytest.mark.parametrize(("part", "kind"), CHAT_CASES)
async def test_chat_refuses_then_drops(
    proxy: RunningProxy, dropping: RunningProxy, part: dict[str, Any], kind: str
) -> None:
    session_id, key = await proxy.start_session()
    with pytest.raises(openai.BadRequestError) as info:
        await openai_client(proxy, key).chat.completions.create(
            model="tiny", messages=_chat_messages(part)
        )
    assert f"{kind!r}" in info.value.message
    assert "messages[0].content[1]" in info.value.message
    assert info.value.param == "messages[0].content[1]"
    assert await _recorded_messages(proxy, key, session_id) == []  # nothing was recorded

    session_id, key = await dropping.start_session()
    completion = await openai_client(dropping, key).chat.completions.create(
        model="tiny", messages=_chat_messages(part)
    )
    assert completion.choices[0].finish_reason == "stop"
    assert await _recorded_messages(dropping, key, session_id) == [
        [{"role": "user", "content": [{"type": "text", "text": "what is it?"}]}]
    ]


@pytest.mark.parametrize(("part", "kind"), RESPONSES_CASES)
async def test_responses_refuses_then_drops(
    proxy: RunningProxy, dropping: RunningProxy, part: dict[str, Any], kind: str
) -> None:
    items: Any = [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "input_text", "text": "and this?"}, part]},
    ]
    _, key = await proxy.start_session()
    with pytest.raises(openai.BadRequestError) as info:
        await openai_client(proxy, key).responses.create(model="tiny", input=items)
    assert f"{kind!r}" in info.value.message
    assert info.value.param == "input[1].content[1]"

    _, key = await dropping.start_session()
    response = await openai_client(dropping, key).responses.create(model="tiny", input=items)
    assert response.status == "completed"


@pytest.mark.parametrize(("block", "kind", "field"), MESSAGES_CASES)
@pytest.mark.parametrize("in_tool_result", [False, True])
async def test_messages_refuses_then_drops(
    proxy: RunningProxy,
    dropping: RunningProxy,
    http2: httpx2.AsyncClient,
    block: dict[str, Any],
    kind: str,
    field: str,
    in_tool_result: bool,
) -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}
    if in_tool_result:
        content: list[Any] = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [block]}]
        messages: Any = [
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": content},
        ]
        where = "messages[2].content[0].content[0]"
    else:
        messages = [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, block]}]
        where = "messages[0].content[1]"
    _, key = await proxy.start_session()
    with pytest.raises(anthropic.BadRequestError) as info:
        await anthropic_client(proxy, key, http2).messages.create(
            model="tiny", max_tokens=32, messages=messages
        )
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert f"{kind!r} at {where}{field} is not supported" in info.value.message

    session_id, key = await dropping.start_session()
    message = await anthropic_client(dropping, key, http2).messages.create(
        model="tiny", max_tokens=32, messages=messages
    )
    assert message.stop_reason in ("end_turn", "max_tokens")
    (recorded,) = await _recorded_messages(dropping, key, session_id)
    assert kind not in repr(recorded)


PLAIN_DOCUMENTS = [
    pytest.param(
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "Dogs bark."},
        },
        "Dogs bark.",
        id="text-source",
    ),
    pytest.param(
        {
            "type": "document",
            "title": "Facts",
            "context": "From the encyclopedia.",
            "source": {
                "type": "content",
                "content": [{"type": "text", "text": "Dogs "}, {"type": "text", "text": "bark."}],
            },
        },
        "Facts\n\nFrom the encyclopedia.\n\nDogs bark.",
        id="content-source-with-title",
    ),
]


@pytest.mark.parametrize(("block", "text"), PLAIN_DOCUMENTS)
async def test_messages_reads_a_plain_text_document_as_text(
    proxy: RunningProxy, http2: httpx2.AsyncClient, block: dict[str, Any], text: str
) -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}
    messages: Any = [
        {"role": "user", "content": [block, {"type": "text", "text": "what does it say?"}]},
        {"role": "assistant", "content": [use]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [block]}],
        },
    ]
    session_id, key = await proxy.start_session()
    message = await anthropic_client(proxy, key, http2).messages.create(
        model="tiny", max_tokens=32, messages=messages
    )
    assert message.stop_reason in ("end_turn", "max_tokens")
    (recorded,) = await _recorded_messages(proxy, key, session_id)
    assert recorded[0] == {
        "role": "user",
        "content": [{"type": "text", "text": text}, {"type": "text", "text": "what does it say?"}],
    }
    assert recorded[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": text}
