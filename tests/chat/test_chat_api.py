from __future__ import annotations

import rltap.chat

EXPECTED_ALL = [
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "ChatRenderer",
    "ContentDelta",
    "Delta",
    "OutputParser",
    "ParentTokens",
    "ParsedOutput",
    "ParsedToolCall",
    "ReasoningDelta",
    "ReasoningParser",
    "Registry",
    "RenderMode",
    "RenderedPrompt",
    "StreamingParser",
    "TokenizerMismatch",
    "ToolCallArgumentsDelta",
    "ToolCallStartDelta",
    "ToolParser",
    "UnknownNameError",
    "build_output_parser",
    "build_streaming_parser",
    "check_same_tokenizer",
    "fold_deltas",
    "get_reasoning_parser",
    "get_tool_parser",
    "parse_output",
    "tokenizer_mismatch",
]


def test_all_is_the_declared_public_api() -> None:
    assert sorted(rltap.chat.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert getattr(rltap.chat, name) is not None
