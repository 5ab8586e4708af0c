from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from aah.data import ByteTokenizer


def test_vocab_and_ascii_ids() -> None:
    tok = ByteTokenizer()
    assert tok.vocab_size == 256
    ids = tok.encode("Hi!")
    assert ids.dtype == np.uint8
    assert ids.tolist() == [72, 105, 33]


def test_non_ascii_round_trip() -> None:
    tok = ByteTokenizer()
    text = "naïve café — 東京 🐍\n"
    ids = tok.encode(text)
    assert ids.tolist() == list(text.encode("utf-8"))
    assert len(ids) > len(text)  # multi-byte characters really became several tokens
    assert tok.decode(ids) == text


@given(st.text())
def test_round_trip_any_text(text: str) -> None:
    tok = ByteTokenizer()
    try:
        ids = tok.encode(text)
    except UnicodeEncodeError:  # lone surrogates have no UTF-8 form
        return
    assert tok.decode(ids) == text


def test_decode_accepts_list_numpy_torch() -> None:
    tok = ByteTokenizer()
    ids = [0xE6, 0x9D, 0xB1, 0x41]  # "東A"
    assert tok.decode(ids) == "東A"
    assert tok.decode(np.array(ids, dtype=np.int64)) == "東A"
    assert tok.decode(torch.tensor(ids)) == "東A"
    assert tok.decode(torch.tensor([ids, ids])) == "東A東A"
    assert tok.decode([]) == ""


def test_decode_invalid_utf8_is_replaced_not_raised() -> None:
    tok = ByteTokenizer()
    assert tok.decode([0x41, 0xFF, 0x42]) == "A\ufffdB"
    assert tok.decode([0xE6, 0x9D]) == "\ufffd"  # truncated 3-byte sequence
    assert tok.decode(bytes(range(256))).startswith("\x00\x01")


def test_decode_rejects_out_of_range_ids() -> None:
    with pytest.raises(ValueError, match="0, 255"):
        ByteTokenizer().decode([65, 256])
    with pytest.raises(ValueError, match="0, 255"):
        ByteTokenizer().decode([-1])
