"""Which stop string ended a reply: the one that ends inside the text of its last token."""

from __future__ import annotations

import pytest

from rltap.chat.renderer import ChatRenderer
from rltap.chat.stop_strings import matched_stop_string

# Pieces as a byte-level tokenizer might cut them; "é" split across two tokens as its 2 bytes.
_PIECES = {1: "Done", 2: ".", 3: " END", 4: " E", 5: "ND.", 6: " and", 7: " more", 8: "caf"}


def _decode(ids: list[int] | tuple[int, ...]) -> str:
    data = b"".join({9: b"\xc3", 10: b"\xa9 STOP"}.get(i) or _PIECES[i].encode() for i in ids)
    return data.decode("utf-8", errors="replace")


@pytest.mark.parametrize(
    ("ids", "stop", "expected"),
    [
        pytest.param([1, 2, 3], ["END"], "END", id="in-last-token"),
        pytest.param([1, 4, 5], ["END"], "END", id="across-tokens"),
        pytest.param([3, 6, 7], ["END"], None, id="earlier-only"),
        pytest.param([1, 2, 3], [], None, id="no-stop-list"),
        pytest.param([1, 2, 3], ["", "END"], "END", id="empty-string-ignored"),
        pytest.param([1, 4, 5], ["ND.", "END"], "END", id="first-to-end-wins"),
        pytest.param([8, 9, 10], ["é STOP"], "é STOP", id="split-character"),
        pytest.param([], ["END"], None, id="no-tokens"),
    ],
)
def test_matched_stop_string(ids: list[int], stop: list[str], expected: str | None) -> None:
    assert matched_stop_string(_decode, ids, stop) == expected


def test_with_the_real_tokenizer(renderer: ChatRenderer) -> None:
    ids = renderer.tokenizer.encode("The answer is 42. Observation: none", add_special_tokens=False)
    # Cut where the engine would: right after the token that completes "Observation:".
    for n in range(1, len(ids) + 1):
        if "Observation:" in renderer.decode(ids[:n]):
            break
    assert matched_stop_string(renderer.decode, ids[:n], ["Observation:", "none"]) == (
        "Observation:"
    )
    assert matched_stop_string(renderer.decode, ids[: n + 1], ["Observation:"]) is None
