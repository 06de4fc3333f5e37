"""Messages to tokens and back: chat templates, incremental rendering, output parsers."""

from __future__ import annotations

from rltap.chat.reasoning import REASONING_PARSERS, ReasoningParser, get_reasoning_parser
from rltap.chat.registry import Registry, UnknownNameError
from rltap.chat.renderer import ChatRenderer, ParentTokens, RenderedPrompt, RenderMode
from rltap.chat.streaming import (
    OutputParser,
    StreamingParser,
    build_output_parser,
    build_streaming_parser,
    parse_output,
)
from rltap.chat.tokenizer_match import TokenizerMismatch, check_same_tokenizer, tokenizer_mismatch
from rltap.chat.tool_parsers import TOOL_PARSERS, ToolParser, get_tool_parser
from rltap.record.parsed import (
    ContentDelta,
    Delta,
    ParsedOutput,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
    fold_deltas,
)

__all__ = [
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
