"""Which of a request's stop strings ended a reply.

Every engine stops right after the token that completes a stop string and keeps that token (the
embedded engines by `StopCriteria`, vLLM with `include_stop_str_in_output`, SGLang with
`no_stop_trim`), so the string that ended a reply is one that ends inside the text of its last
token. The session finds it here, once per reply, whichever engine produced it: the APIs report
it (Anthropic's `stop_sequence`), and no engine needs to say it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["matched_stop_string"]

# A decoded character takes at most 4 bytes; a byte-level token holds at least one byte.
_BYTES_PER_CHAR = 4


def matched_stop_string(
    decode: Callable[[Sequence[int]], str], output_ids: Sequence[int], stop: Sequence[str]
) -> str | None:
    """The stop string in `stop` that the last of `output_ids` completed, or None.

    Only the reply's tail is decoded: enough tokens to hold the longest stop string. Where two
    strings end in the last token, the one that ends first is the one the engine saw first.
    """
    stop = [s for s in stop if s]
    if not stop or not output_ids:
        return None
    longest = max(len(s) for s in stop)
    tail = list(output_ids[-(_BYTES_PER_CHAR * longest + 1) :])
    text = decode(tail)
    # Where the last token's text begins; a character split across the last two tokens decodes
    # to U+FFFD without the last one, so compare rather than take the length.
    before = decode(tail[:-1])
    boundary = 0
    for a, b in zip(before, text, strict=False):
        if a != b:
            break
        boundary += 1
    best: tuple[int, str] | None = None
    for sequence in stop:
        position = text.find(sequence, max(0, boundary - len(sequence) + 1))
        if position < 0:
            continue
        end = position + len(sequence)
        if best is None or end < best[0]:
            best = (end, sequence)
    return None if best is None else best[1]
