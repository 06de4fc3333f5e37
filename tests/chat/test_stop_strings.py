"""A reply's text cut at the first stop string, the same whole or in any pieces, nothing of a
stop string ever released early."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rltap.chat.renderer import ChatRenderer
from rltap.chat.stop_strings import StopStringCut, cut_at_stop


@pytest.mark.parametrize(
    ("text", "stop", "expected"),
    [
        pytest.param("Done. END", ["END"], ("Done. ", "END"), id="at-the-end"),
        pytest.param("a END b END", ["END"], ("a ", "END"), id="first-occurrence"),
        pytest.param("Done.", ["END"], ("Done.", None), id="no-match"),
        pytest.param("Done. EN", ["END"], ("Done. EN", None), id="a-start-only"),
        pytest.param("Done. END", [], ("Done. END", None), id="no-stop-list"),
        pytest.param("Done. END", ["", "END"], ("Done. ", "END"), id="empty-string-ignored"),
        pytest.param("Done. END.", ["END.", "ND"], ("Done. E", "ND"), id="first-to-end-wins"),
        pytest.param("xab", ["b", "ab"], ("xa", "b"), id="same-end-first-listed"),
        pytest.param("café STOP", ["é STOP"], ("caf", "é STOP"), id="unicode"),
    ],
)
def test_cut_at_stop(text: str, stop: list[str], expected: tuple[str, str | None]) -> None:
    assert cut_at_stop(text, stop) == expected


def test_a_possible_start_of_a_stop_string_is_held_back() -> None:
    cut = StopStringCut(["Observation:", "END"])
    assert cut.push("The answer. Obs") == "The answer. "
    assert cut.push("erv") == ""
    assert cut.push("ed, then E") == "Observed, then "
    assert cut.push("N") == ""
    assert cut.push("D of it") == ""
    assert cut.matched == "END"
    assert cut.push("more") == ""
    assert cut.flush() == ""


def test_flush_releases_what_was_no_stop_string() -> None:
    cut = StopStringCut(["Observation:"])
    assert cut.push("It was Obs") == "It was "
    assert cut.flush() == "Obs"
    assert cut.matched is None


STOPS = ["ab", "b.", "aaa", "é!"]


@given(
    text=st.text(alphabet="ab.é! ", max_size=24),
    points=st.lists(st.integers(min_value=0, max_value=24), max_size=6),
)
def test_any_pieces_release_the_whole_cut_and_nothing_of_a_stop_string(
    text: str, points: list[int]
) -> None:
    kept, matched = cut_at_stop(text, STOPS)
    cuts = sorted({p for p in points if p < len(text)})
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    stream = StopStringCut(STOPS)
    released = ""
    for piece in pieces:
        released += stream.push(piece)
        # What is out can never turn into a stop string: it is the start of the kept text.
        assert kept.startswith(released)
    released += stream.flush()
    assert (released, stream.matched) == (kept, matched)
    if matched is not None:
        assert text.startswith(kept + matched)
        assert not any(s in kept + matched[:-1] for s in STOPS)


def test_where_the_engine_stops_with_the_real_tokenizer(renderer: ChatRenderer) -> None:
    ids = renderer.tokenizer.encode("The answer is 42. Observation: none", add_special_tokens=False)
    # Cut where the engine would: right after the token that completes "Observation:".
    n = next(n for n in range(1, len(ids) + 1) if "Observation:" in renderer.decode(ids[:n]))
    assert cut_at_stop(renderer.decode(ids[:n]), ["Observation:", "none"]) == (
        "The answer is 42. ",
        "Observation:",
    )
