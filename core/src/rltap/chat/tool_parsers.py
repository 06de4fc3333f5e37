"""Tool-call parsers: model output text -> content + tool calls, by name (`--tool-parser hermes`).

Formats (registered names in brackets):

- `hermes` (aliases `qwen`, `qwen25`, SGLang's and AReaL's names):
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, several blocks in a row
  are parallel calls. A `<tool_call>` opened again before the block closes makes the first one
  text.
- `llama3` (alias `llama3_json`): `{"name": ..., "parameters": {...}}` as the first non-blank
  content, or after `<|python_tag|>` anywhere; several calls separated by `;`.
- `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (v0.3 style) or
  `[TOOL_CALLS]name[ARGS]{...}`, repeated once per call (newer tokenizers).

The machinery they share is in `rltap.chat.tool_call_stream`.
"""

from __future__ import annotations

import json

from rltap.chat.lark_syntax import TokenSyntax, literal, text_without
from rltap.chat.registry import Registry
from rltap.chat.tool_call_stream import (
    StreamState,
    ToolCallStream,
    ToolParser,
    call_fields,
    loads_json,
)
from rltap.record.parsed import IdFactory

__all__ = [
    "TOOL_PARSERS",
    "HermesToolParser",
    "Llama3JsonToolParser",
    "MistralToolParser",
    "ToolCallStream",
    "ToolParser",
    "get_tool_parser",
]

TOOL_PARSERS: Registry[type[ToolParser]] = Registry("tool parser")
"""Every tool parser by name; `get_tool_parser` instantiates one."""


def get_tool_parser(name: str) -> ToolParser:
    """The tool parser registered as `name` (raises `UnknownNameError` listing known names)."""
    return TOOL_PARSERS.get(name)()


_HERMES_OPEN = "<tool_call>"
_HERMES_CLOSE = "</tool_call>"


def _json_call(name: str, key: str, arguments: str) -> str:
    """Lark for `{"name": "<name>", "<key>": <arguments>}`, spaced as chat templates write it
    (json.dumps' separators); `arguments` is the rule of the arguments object."""
    head = f'{{"name": {json.dumps(name, ensure_ascii=False)}, "{key}": '
    return f'{literal(head)} {arguments} "}}"'


class _HermesStream(ToolCallStream):
    def __init__(self, *, new_id: IdFactory | None = None) -> None:
        super().__init__(new_id=new_id)
        self._scanned = 0  # how much of an open block's buffer has been searched for tags

    def _step(self) -> bool:
        if self._state is StreamState.TEXT:
            if self._text_until((_HERMES_OPEN,)) is None:
                return False
            self._state = StreamState.BLOCK
            self._scanned = 0
            return True
        return self._step_block()

    def _step_block(self) -> bool:
        # Resume the search where the last one stopped, less a tag's length for a split tag.
        start = max(0, self._scanned - len(_HERMES_CLOSE) + 1)
        self._scanned = len(self._buf)
        close = self._buf.find(_HERMES_CLOSE, start)
        reopen = self._buf.find(_HERMES_OPEN, start)
        if reopen >= 0 and (close < 0 or reopen < close):
            # An opening tag inside an open block: the first one was text.
            self._pending += self._buf[:reopen]
            self._buf = self._buf[reopen:]
            return self._fail()
        if close < 0:
            return False
        body = self._buf[:close]
        self._buf = self._buf[close + len(_HERMES_CLOSE) :]
        fields = call_fields(loads_json(body), ("arguments", "parameters"))
        if fields is None:
            self._pending += body + _HERMES_CLOSE
            return self._fail()
        self._pending = ""
        self._emit_call(*fields)
        self._state = StreamState.TEXT
        return True


@TOOL_PARSERS.register("hermes", "qwen", "qwen25")
class HermesToolParser(ToolParser):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (Hermes, Qwen 2.5/3)."""

    name = "hermes"
    opening_tags = (_HERMES_OPEN,)
    call_separator = "\n"  # one block per line, as Qwen's template writes parallel calls

    def call_grammar(self, name: str, arguments: str, tokens: TokenSyntax) -> str:
        """`<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`."""
        call = _json_call(name, "arguments", arguments)
        return f'{tokens.tag(_HERMES_OPEN)} "\\n" {call} "\\n" {tokens.tag(_HERMES_CLOSE)}'

    def stream(self, *, new_id: IdFactory | None = None) -> ToolCallStream:
        """A fresh incremental parser for one reply."""
        return _HermesStream(new_id=new_id)


_PYTHON_TAG = "<|python_tag|>"


class _Llama3Stream(ToolCallStream):
    def __init__(self, *, new_id: IdFactory | None = None) -> None:
        super().__init__(new_id=new_id)
        self._state = StreamState.START

    def _step(self) -> bool:
        match self._state:
            case StreamState.START:
                rest = self._buf.lstrip()
                if not rest:
                    return False
                # Plain JSON counts as a call only at the very start of the content.
                self._state = StreamState.ARGS if rest[0] == "{" else StreamState.TEXT
                return True
            case StreamState.TEXT:
                if self._text_until((_PYTHON_TAG,)) is None:
                    return False
                self._state = StreamState.ARGS
                return True
            case StreamState.ARGS:
                next_char = self._skip_blank()
                if next_char is None:
                    return False
                return self._start_json() if next_char == "{" else self._fail()
            case StreamState.JSON:
                return self._step_json()
            case _:
                return self._step_after()

    def _step_json(self) -> bool:
        text = self._take_json()
        if text is None:
            return False
        fields = call_fields(loads_json(text), ("parameters", "arguments"))
        if fields is None:
            self._pending += text
            return self._fail()
        self._pending = ""
        self._emit_call(*fields)
        self._state = StreamState.AFTER
        return True

    def _step_after(self) -> bool:
        next_char = self._skip_blank()
        if next_char is None:
            return False
        if next_char != ";":
            return self._fail()
        self._pending += ";"
        self._buf = self._buf[1:]
        self._state = StreamState.ARGS
        return True


@TOOL_PARSERS.register("llama3", "llama3_json")
class Llama3JsonToolParser(ToolParser):
    """Llama 3.x JSON calls: `{"name": ..., "parameters": {...}}`, `;`-separated, at the start of
    the content or after `<|python_tag|>`."""

    name = "llama3"
    call_separator = "; "
    text_before_calls = False  # a call without the tag is JSON at the start of the content

    def call_grammar(self, name: str, arguments: str, tokens: TokenSyntax) -> str:
        """`{"name": ..., "parameters": ...}`, the form Llama 3.x writes without a tag."""
        return _json_call(name, "parameters", arguments)

    def no_call_text(self, tokens: TokenSyntax) -> str:
        """Text that does not start with `{` (after blanks) and holds no `<|python_tag|>`."""
        return text_without((_PYTHON_TAG,), within=r"/\s*([^{\s](.|\n)*)?/")

    def stream(self, *, new_id: IdFactory | None = None) -> ToolCallStream:
        """A fresh incremental parser for one reply."""
        return _Llama3Stream(new_id=new_id)


_MISTRAL_TAG = "[TOOL_CALLS]"
_MISTRAL_ARGS = "[ARGS]"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


class _MistralStream(ToolCallStream):
    def __init__(self, *, new_id: IdFactory | None = None) -> None:
        super().__init__(new_id=new_id)
        self._name = ""  # "" while reading the [{...}] array form

    def _step(self) -> bool:
        match self._state:
            case StreamState.TEXT:
                if self._text_until((_MISTRAL_TAG,)) is None:
                    return False
                self._state = StreamState.HEAD
                return True
            case StreamState.HEAD:
                next_char = self._skip_blank()
                if next_char is None:
                    return False
                self._name = ""
                if next_char == "[":
                    return self._start_json()
                self._state = StreamState.NAME
                return True if next_char in _NAME_CHARS else self._fail()
            case StreamState.NAME:
                return self._step_name()
            case StreamState.ARGS:
                next_char = self._skip_blank()
                if next_char is None:
                    return False
                return self._start_json() if next_char == "{" else self._fail()
            case _:
                return self._step_json()

    def _step_name(self) -> bool:
        size = 0
        while size < len(self._buf) and self._buf[size] in _NAME_CHARS:
            size += 1
        self._name += self._buf[:size]
        self._pending += self._buf[:size]
        self._buf = self._buf[size:]
        if not self._buf.startswith(_MISTRAL_ARGS):
            # Wait while the buffer could still become "[ARGS]"; anything else ends the name.
            return False if _MISTRAL_ARGS.startswith(self._buf) else self._fail()
        self._pending += _MISTRAL_ARGS
        self._buf = self._buf[len(_MISTRAL_ARGS) :]
        self._state = StreamState.ARGS
        return True

    def _step_json(self) -> bool:
        text = self._take_json()
        if text is None:
            return False
        value = loads_json(text)
        if self._name:
            # The name form carries the arguments object itself; wrap it as a one-call array.
            value = [{"name": self._name, "arguments": value}] if isinstance(value, dict) else None
        calls = _array_calls(value)
        if calls is None:
            self._pending += text
            return self._fail()
        self._pending = ""
        for fields in calls:
            self._emit_call(*fields)
        self._state = StreamState.TEXT
        return True


def _array_calls(value: object) -> list[tuple[str, str]] | None:
    """Every call of a non-empty JSON array of call objects, or None if any is not a call."""
    if not isinstance(value, list) or not value:
        return None
    calls = [call_fields(item, ("arguments", "parameters")) for item in value]
    return None if None in calls else [fields for fields in calls if fields is not None]


@TOOL_PARSERS.register("mistral")
class MistralToolParser(ToolParser):
    """Mistral calls: `[TOOL_CALLS][{...}, ...]` or `[TOOL_CALLS]name[ARGS]{...}` per call."""

    name = "mistral"
    opening_tags = (_MISTRAL_TAG,)

    def call_grammar(self, name: str, arguments: str, tokens: TokenSyntax) -> str:
        """`[TOOL_CALLS]name[ARGS]{...}` where the tokenizer has `[ARGS]` (newer ones), else one
        `{"name": ..., "arguments": ...}` item of the v0.3 array."""
        if tokens.has_token(_MISTRAL_ARGS):
            tag, args_tag = tokens.tag(_MISTRAL_TAG), tokens.tag(_MISTRAL_ARGS)
            return f"{tag} {literal(name)} {args_tag} {arguments}"
        return _json_call(name, "arguments", arguments)

    def calls_grammar(self, call: str, *, parallel: bool, tokens: TokenSyntax) -> str:
        """Name-form calls one after another, or `[TOOL_CALLS][item, item, ...]`."""
        if tokens.has_token(_MISTRAL_ARGS):
            return f"{call}+" if parallel else call
        items = f'{call} (", " {call})*' if parallel else call
        return f'{tokens.tag(_MISTRAL_TAG)} "[" {items} "]"'

    def stream(self, *, new_id: IdFactory | None = None) -> ToolCallStream:
        """A fresh incremental parser for one reply."""
        return _MistralStream(new_id=new_id)
