"""A reply's ids read one at a time give what its whole text gives: cut at the stop string,
parsed, a call the token limit cut dropped."""

from __future__ import annotations

import pytest

from rltap.chat.renderer import ChatRenderer
from rltap.chat.reply_reader import Reply, ReplyReader, read_reply
from rltap.chat.streaming import build_output_parser
from rltap.record.parsed import ParsedOutput, ParsedToolCall, sequential_call_ids

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
ADD = ParsedToolCall(id="call_" + "0" * 24, name="add", arguments='{"a":1}')


@pytest.mark.parametrize(
    ("text", "stop", "length", "expected"),
    [
        pytest.param(
            "<think>hm</think>The answer. Observation: x",
            ["Observation:"],
            False,
            Reply(ParsedOutput("The answer. ", "hm"), "Observation:"),
            id="stop-string",
        ),
        pytest.param(
            "<think>a Stop</think>b",
            ["Stop"],
            False,
            Reply(ParsedOutput("", "a "), "Stop"),
            id="stop-in-reasoning",
        ),
        pytest.param(
            f"Sure. {CALL} Obs",
            ["Obs"],
            True,
            Reply(ParsedOutput("Sure.", None, [ADD]), "Obs"),
            id="stop-after-a-call",
        ),
        pytest.param(
            f"Sure. {CALL[:30]}",
            ["Obs"],
            True,
            Reply(ParsedOutput("Sure."), truncated=True),
            id="length-in-a-call",
        ),
        # A stop string ended it, not the limit: the open block stays text, verbatim.
        pytest.param(
            f"Sure. {CALL[:30]}Obs",
            ["Obs"],
            True,
            Reply(ParsedOutput(f"Sure. {CALL[:30]}"), "Obs"),
            id="stop-in-a-call",
        ),
        pytest.param(
            "Half a sen",
            [],
            True,
            Reply(ParsedOutput("Half a sen"), truncated=True),
            id="length-in-text",
        ),
    ],
)
def test_one_id_at_a_time_reads_as_the_whole_text(
    renderer: ChatRenderer, text: str, stop: list[str], length: bool, expected: Reply
) -> None:
    parser = build_output_parser("hermes", "qwen3")
    assert read_reply(parser, text, stop, length=length, new_id=sequential_call_ids()) == expected
    reader = ReplyReader(
        renderer.stream_decoder(), parser.stream(new_id=sequential_call_ids()), stop
    )
    for token_id in renderer.tokenizer.encode(text, add_special_tokens=False):
        reader.push([token_id])
    reader.finish(length=length)
    assert reader.reply == expected
