"""A reply's text cut at the first of the request's stop strings, whole or as it streams.

Every engine stops right after the token that completes a stop string and keeps that token (the
embedded engines by `StopCriteria`, vLLM with `include_stop_str_in_output`, SGLang with
`no_stop_trim`): the recorded tokens stay exactly what the engine produced. What the client sees
is the text before the stop string, as OpenAI, Anthropic and vLLM return it; the session cuts it
here, once per reply, whichever engine produced it, and the APIs report the string that matched
(Anthropic's `stop_sequence`).

The string that ended a reply is the one whose match ends first (the engine saw it complete
first); of two that end at the same character, the one listed first. A streamed reply holds back
any end of its text that could still be the start of a stop string, so no part of one ever
reaches a client.
"""

from __future__ import annotations

from collections.abc import Sequence

from rltap.chat.tool_call_stream import partial_tag_len

__all__ = ["StopStringCut", "cut_at_stop"]


class StopStringCut:
    """Text that arrives in pieces, released up to the first stop string, nothing after it.

    Usage:
        cut = StopStringCut(["Observation:"])
        cut.push("The answer. Obser")  # "The answer. "
        cut.push("vation: none")       # ""
        cut.flush()                    # ""
        cut.matched                    # "Observation:"
    """

    __slots__ = ("_held", "_stop", "matched")

    def __init__(self, stop: Sequence[str]) -> None:
        self._stop = tuple(s for s in stop if s)
        self._held = ""
        self.matched: str | None = None

    def push(self, text: str) -> str:
        """The part of `text` (with what was held back) known to come before any stop string."""
        if not self._stop:
            return text
        if self.matched is not None:
            return ""
        text = self._held + text
        first: tuple[int, int, str] | None = None  # (end, start, string) of the first to end
        for sequence in self._stop:
            start = text.find(sequence)
            if start >= 0 and (first is None or start + len(sequence) < first[0]):
                first = (start + len(sequence), start, sequence)
        if first is not None:
            self._held = ""
            self.matched = first[2]
            return text[: first[1]]
        keep = partial_tag_len(text, self._stop)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """End of the reply: what was held back was no stop string after all."""
        held, self._held = self._held, ""
        return held


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, str | None]:
    """`text` up to the first of `stop` to match, and that string (None: none matched)."""
    cut = StopStringCut(stop)
    kept = cut.push(text) + cut.flush()
    return kept, cut.matched
