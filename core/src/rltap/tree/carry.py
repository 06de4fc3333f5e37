"""Which earlier reply a call carries in another form: the evidence behind the `carry` link.

Frameworks carry a reply forward in forms that the exact-message rules of `rltap.tree.links` do not
see: with text appended (smolagents' CodeAgent adds `</code>` and `Calling tools: [...]`), with
its tool calls re-rendered as text (smolagents' ToolCallingAgent), relayed as a `user` message
named after its speaker (AutoGen's group chats), or inside a transcript re-rendered into one
message (LlamaIndex's structured output, DSPy's ReAct). What survives every such form is the
reply's words in their order, and the ids of its tool calls.

A reply's marks:
- every run of `GROUP` consecutive words in it (words: the `\\w+` runs of its text and of its
  tool calls' names and arguments, so JSON and Python's repr of the same arguments agree, and
  re-rendered field headers or quotes around the text do not matter);
- the ids of its tool calls;
- its whole text, whitespace collapsed (a reply relayed verbatim, however short or however
  much it repeats of its prompt).

A request carries a reply when it holds one of the reply's tool-call ids, or a run of `GROUP`
words of the reply that the reply's own prompt did not hold (words the model wrote, not words it
repeated: an answer that quotes its question, or a framework's boilerplate, carries nothing of
its own), or, after its first message, a message whose whole text is the reply's text. Among the
replies a request carries, the one it carries latest wins; a reply of the calling agent itself
before any other (an agent continuing its own conversation, with another agent's answer carried
in it).

Cost: O(W) for a request of W words (one dictionary lookup per window of `GROUP` words), plus,
for the few candidate replies, one pass over each one's prompt. A reply of W words adds W
integer keys (about 0.8 ms and 120 KiB for 1,500 words; a thinking model's reasoning is not
indexed, only the text and tool calls the next call may carry), when a later call first looks
replies up: a session whose calls all link by `prefix` indexes nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

__all__ = ["GROUP", "CarryIndex", "conversation_text", "message_text", "tool_function", "words"]

GROUP = 4
# Candidates whose prompts are read to rule out echoes, best first.
_MAX_VERIFIED = 8
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def _content_text(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, Sequence):
        for part in content:
            if isinstance(part, Mapping):
                for key in ("text", "content", "input"):
                    value = part.get(key)
                    if isinstance(value, str):
                        yield value
                    elif value is not None:
                        yield from _content_text(value)


def tool_function(call: Mapping[str, Any]) -> Mapping[str, Any]:
    """The part of a tool call that holds its `name` and `arguments` (Chat Completions nests it
    under `function`; other forms hold them at the top)."""
    function = call.get("function")
    return function if isinstance(function, Mapping) else call


def _call_text(call: Mapping[str, Any]) -> Iterator[str]:
    function = tool_function(call)
    name, arguments = function.get("name"), function.get("arguments")
    if isinstance(name, str):
        yield name
    if isinstance(arguments, str):
        yield arguments
    elif arguments is not None:
        yield repr(arguments)


def message_text(message: Mapping[str, Any]) -> str:
    """A message's text: its content and its tool calls' names and arguments."""
    parts = list(_content_text(message.get("content")))
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            parts.extend(_call_text(call))
    return "\n".join(parts)


def _call_ids(message: Mapping[str, Any]) -> Iterator[str]:
    """The tool-call ids a message names in its fields: its calls', or the one it answers."""
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and isinstance(call.get("id"), str):
            yield call["id"]
    if isinstance(message.get("tool_call_id"), str):
        yield message["tool_call_id"]


def _windows(text_words: Sequence[str]) -> Iterator[tuple[int, tuple[str, ...]]]:
    """Every run of GROUP consecutive words, with where it starts."""
    return enumerate(zip(*(text_words[shift:] for shift in range(GROUP)), strict=False))


def _whole_key(text: str) -> bytes:
    return hashlib.blake2b(" ".join(text.split()).encode(), digest_size=16).digest()


class _Candidate:
    __slots__ = ("groups", "last", "marked")

    def __init__(self) -> None:
        self.groups: set[tuple[str, ...]] = set()
        self.last = -1  # where in the request its latest mark stands
        self.marked = False  # by a tool-call id or its whole text: no echo to rule out


class CarryIndex:
    """Complete interactions' replies by their marks; `carried` finds the reply a request
    carries. Not thread-safe by itself: `InteractionCache` holds its lock around every call."""

    def __init__(self) -> None:
        # A run's hash (its words' own hashes, stable within the process: the index never leaves
        # it) -> the reply that wrote it last; a run two replies share points at the later one.
        self._by_group: dict[int, str] = {}
        self._by_id: dict[str, str] = {}
        self._by_whole: dict[bytes, str] = {}
        # Replies completed since the last lookup: indexed when a call first needs them, so a
        # session whose calls all link by `prefix` (most tool loops) never pays for the index.
        self._unread: list[tuple[str, Iterable[Mapping[str, Any]]]] = []

    def completed(self, interaction_id: str, outputs: Iterable[Mapping[str, Any]]) -> None:
        """A complete interaction's reply (its assistant messages), to index before the next
        lookup."""
        self._unread.append((interaction_id, outputs))

    def _index(self, interaction_id: str, outputs: Iterable[Mapping[str, Any]]) -> None:
        texts = []
        for message in outputs:
            if message.get("role") != "assistant":
                continue
            texts.append(message_text(message))
            for call_id in _call_ids(message):
                if _WORD.fullmatch(call_id):  # one word, as a request's text is read
                    self._by_id[call_id] = interaction_id
        text = "\n".join(texts)
        for _, window in _windows(words(text)):
            self._by_group[hash(window)] = interaction_id
        if text.strip():
            self._by_whole[_whole_key(text)] = interaction_id

    def carried(
        self,
        messages: Sequence[Mapping[str, Any]],
        prompt_of: Callable[[str], Sequence[Mapping[str, Any]]],
        agent_of: Callable[[str], str | None],
        agent: str | None,
        *,
        relayed: bool = False,
    ) -> str | None:
        """The interaction whose reply `messages` carry (see the module docstring), or None.

        `prompt_of(id)` is an interaction's own messages, `agent_of(id)` its agent; `agent` is
        the calling agent's. `relayed`: `messages` are all another agent speaking (so the first
        of them, too, may be a reply relayed whole).
        """
        for unread in self._unread:
            self._index(*unread)
        self._unread.clear()
        if not (self._by_group or self._by_id or self._by_whole):
            return None  # no reply to carry yet (a session's first call)
        found: dict[str, _Candidate] = {}
        position = 0
        first_turn = (
            -1
            if relayed
            else next(
                (i for i, m in enumerate(messages) if m.get("role") not in {"system", "developer"}),
                len(messages),
            )
        )
        for index, message in enumerate(messages):
            text = message_text(message)
            message_words = words(text)
            # An id in the text (re-rendered calls) or in the message's own fields.
            for offset, word in enumerate([*message_words, *_call_ids(message)]):
                owner = self._by_id.get(word)
                if owner is not None:
                    candidate = found.setdefault(owner, _Candidate())
                    candidate.marked, candidate.last = True, position + offset
            for offset, window in _windows(message_words):
                owner = self._by_group.get(hash(window))
                if owner is not None:
                    candidate = found.setdefault(owner, _Candidate())
                    candidate.groups.add(window)
                    candidate.last = position + offset
            position += len(message_words)
            if index > first_turn:
                owner = self._by_whole.get(_whole_key(text))
                if owner is not None:
                    candidate = found.setdefault(owner, _Candidate())
                    candidate.marked, candidate.last = True, position
        ranked = sorted(
            found, key=lambda key: (agent_of(key) == agent, found[key].last), reverse=True
        )
        for owner in ranked[:_MAX_VERIFIED]:
            if found[owner].marked or _written(found[owner].groups, prompt_of(owner)):
                return owner
        return None


def _written(found: set[tuple[str, ...]], prompt: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some of the runs of words `found` are not in `prompt`: the model wrote them."""
    if not found:
        return False
    held = f" {' '.join(words(conversation_text(prompt)))} "
    return any(f" {' '.join(window)} " not in held for window in found)


def conversation_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of every message (`message_text`), one after the other."""
    return "\n".join(message_text(message) for message in messages)
