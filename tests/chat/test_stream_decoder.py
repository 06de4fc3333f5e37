"""StreamDecoder: deltas that join into the tokenizer's own decode, never half a character.

A Rust tokenizer is decoded with tokenizers' DecodeStream, any other through its `decode`; both
are checked against the same full decode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rltap.chat.renderer import ChatRenderer
from rltap.chat.stream_decoder import StreamDecoder

TEXT = "naïve 👩‍👩‍👧 東京 done"  # the emoji's UTF-8 bytes span two tokens each


@pytest.fixture(scope="module", params=["DecodeStream", "decode"])
def source(request: pytest.FixtureRequest, qwen_tokenizer: Any) -> Any:
    """What the decoder reads: the Rust tokenizer (DecodeStream) or transformers' tokenizer."""
    return qwen_tokenizer.backend_tokenizer if request.param == "DecodeStream" else qwen_tokenizer


def test_a_character_split_across_tokens_comes_whole(source: Any, qwen_tokenizer: Any) -> None:
    decoder = StreamDecoder(source)
    deltas = [decoder.push([token]) for token in qwen_tokenizer.encode(TEXT)]
    assert "" in deltas  # held back while the emoji was partial
    assert not any("\ufffd" in delta for delta in deltas)
    assert [*deltas, decoder.flush()] == [*deltas, ""]
    assert "".join(deltas) == decoder.text == TEXT


def test_ids_pushed_together_give_the_same_text(source: Any, qwen_tokenizer: Any) -> None:
    ids = qwen_tokenizer.encode(TEXT)
    decoder = StreamDecoder(source)
    deltas = [decoder.push(ids[at : at + 3]) for at in range(0, len(ids), 3)]
    assert "".join(deltas) + decoder.flush() == TEXT
    assert decoder.push([]) == ""


@pytest.mark.parametrize("together", [1, 2], ids=["one_by_one", "all_at_once"])
def test_a_reply_cut_inside_a_character_flushes_what_it_has(
    source: Any, qwen_tokenizer: Any, together: int
) -> None:
    cut = qwen_tokenizer.encode("ok 👩")[:-1]  # "ok", then the emoji's first bytes
    assert len(cut) == 2
    decoder = StreamDecoder(source)
    pushed = "".join(decoder.push(cut[at : at + together]) for at in range(0, 2, together))
    assert not pushed.endswith("\ufffd")
    tail = decoder.flush()
    assert tail.endswith("\ufffd")
    assert pushed + tail == decoder.text == qwen_tokenizer.decode(cut)
    assert decoder.flush() == ""
    # Whatever comes after a flush is decoded on its own, never repeating the flushed ids.
    assert decoder.push(qwen_tokenizer.encode(" done")) == " done"
    assert decoder.text == qwen_tokenizer.decode(cut) + " done"


def test_a_renderer_that_cleans_up_spaces_streams_its_own_decode(
    qwen_tokenizer_dir: Path,
) -> None:
    from transformers import AutoTokenizer

    # Transformers 5 cleans a BPE tokenizer's text up only when told twice.
    force = {"clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output": True}
    tokenizer = AutoTokenizer.from_pretrained(
        str(qwen_tokenizer_dir), clean_up_tokenization_spaces=True, **force
    )
    renderer = ChatRenderer(tokenizer)
    ids = tokenizer.encode("Hello , world .")
    assert tokenizer.backend_tokenizer.decode(ids) == "Hello , world ."  # what DecodeStream gives
    decoder = renderer.stream_decoder()
    streamed = "".join(decoder.push([token]) for token in ids) + decoder.flush()
    assert streamed == renderer.decode(ids) == "Hello, world."


@settings(max_examples=150, deadline=None)
@given(ids=st.lists(st.integers(min_value=0, max_value=151664), max_size=24), skip=st.booleans())
def test_deltas_join_into_the_full_decode(
    source: Any, qwen_tokenizer: Any, ids: list[int], skip: bool
) -> None:
    decoder = StreamDecoder(source, skip_special_tokens=skip)
    deltas = [decoder.push([i]) for i in ids]
    assert not any(delta.endswith("\ufffd") for delta in deltas)
    deltas.append(decoder.flush())
    assert "".join(deltas) == decoder.text == qwen_tokenizer.decode(ids, skip_special_tokens=skip)
