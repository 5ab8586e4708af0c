"""Generated tasks: determinism, answers recoverable from context, buckets, held-out val."""

import numpy as np
import pytest

from aah.data import DataConfig, load_tokens
from aah.data.passkey import PASSKEY_LEN, generate_passkey
from aah.data.recall import generate_recall
from aah.data.synthetic import KEYS, MARKER, VALUES, distance_buckets

T = 64


def test_same_seed_same_stream_other_seed_differs():
    for gen in (generate_recall, generate_passkey):
        a, b = gen(20_000, T, 3), gen(20_000, T, 3)
        assert np.array_equal(a.tokens, b.tokens)
        assert np.array_equal(a.answer_distance, b.answer_distance)
        assert not np.array_equal(a.tokens[:5000], gen(20_000, T, 4).tokens[:5000])


@pytest.mark.parametrize("fused", [True, False])
def test_every_recall_answer_is_the_value_of_its_key_at_the_stated_distance(fused):
    s = generate_recall(50_000, T, 1, words=1, n_keys=16, n_values=8, fused=fused)
    tok, dist = s.tokens, s.answer_distance
    answers = np.nonzero(dist)[0]
    assert len(answers) > 2000
    for i in answers:
        d = int(dist[i])
        key = tok[i - 1]
        assert key in KEYS[:16]
        if fused:  # one byte names the key and the value
            assert 128 <= tok[i] < 256 and (tok[i] - 128) // 8 == KEYS.index(key)
        else:
            assert tok[i] in VALUES[:8]
        # the source record: the same key, followed by the same value, d bytes earlier ...
        assert tok[i - 1 - d] == key and tok[i - d] == tok[i]
        # ... is the key's latest record, and every record of the key in the T bytes before
        # the answer holds the same value: the answer is unambiguous in any window
        between = tok[i - d : i - 1]
        assert key not in between
        recent = np.nonzero(tok[max(0, i - 1 - T) : i - 1] == key)[0] + max(0, i - 1 - T)
        assert all(tok[p + 1] == tok[i] for p in recent)


def test_passkey_answers_are_the_needle_at_the_end_of_each_block():
    tok, dist = (s := generate_passkey(40 * T, T, 2)).tokens, s.answer_distance
    assert tok.size == 40 * T
    for b in range(40):
        block, d = tok[b * T : (b + 1) * T], dist[b * T : (b + 1) * T]
        assert list(np.nonzero(block == MARKER)[0])[-1] == T - PASSKEY_LEN - 1
        assert (block == MARKER).sum() == 2
        assert (d[-PASSKEY_LEN:] > 0).all() and not d[:-PASSKEY_LEN].any()
        needle = T - PASSKEY_LEN - 1 - d[-1]
        assert block[needle] == MARKER
        assert bytes(block[needle + 1 : needle + 1 + PASSKEY_LEN]) == bytes(block[-PASSKEY_LEN:])


@pytest.mark.parametrize("gen", [generate_recall, generate_passkey])
def test_distances_fill_every_bucket_and_custom_buckets_are_respected(gen):
    s = gen(100_000, 256, 2)
    d = s.answer_distance[s.answer_distance > 0]
    buckets = distance_buckets(256)
    assert buckets == [(4, 8), (8, 16), (16, 32), (32, 64), (64, 128), (128, 256)]
    for lo, hi in buckets[1:]:  # [4, 8) is too near for a passkey of 4 digits
        assert ((d >= lo) & (d < hi)).sum() > 100
    assert d.max() < 256
    custom = gen(50_000, 256, 2, edges=[10, 20, 200])
    c = custom.answer_distance[custom.answer_distance > 0]
    assert c.min() >= 10 and c.max() < 200
    assert ((c < 20).sum() > 50) and ((c >= 20).sum() > 50)


def test_validation_is_fixed_and_held_out():
    cfg = DataConfig(corpus="synthetic:recall", max_bytes=30_000)
    a, b = load_tokens(cfg, seq_len=T), load_tokens(cfg, seq_len=T)
    assert np.array_equal(a.val, b.val)
    assert np.array_equal(a.val_answer_distance, b.val_answer_distance)
    assert not np.array_equal(a.train[:10_000], a.val[:10_000])
    assert a.answer_buckets == ((4, 8), (8, 16), (16, 32), (32, 64))
    assert a.name == "synthetic:recall" and a.train_answer_distance.size == a.train.size
    p = load_tokens(DataConfig(corpus="synthetic:passkey", max_bytes=30_000), seq_len=T)
    assert p.val.size % T == 0 and p.val_answer_distance.max() > 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("recall_keys", 1),
        ("recall_keys", 27),
        ("recall_values", 11),
        ("recall_words", -1),
        ("recall_buckets", [8]),
        ("recall_buckets", [8, 8]),
        ("recall_buckets", [1, 8]),
        ("recall_format", "triple"),
        ("recall_values", 9),  # 16 keys x 9 values do not fit in the 128 fused bytes
    ],
)
def test_bad_task_fields_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"data\.{field}"):
        DataConfig(corpus="synthetic:recall", **{field: value}).validate()


def test_task_needs_a_sequence_length_that_fits():
    with pytest.raises(ValueError, match="sequence length"):
        load_tokens(DataConfig(corpus="synthetic:recall"), seq_len=4)
    with pytest.raises(ValueError, match="sequence length"):
        load_tokens(DataConfig(corpus="synthetic:passkey"), seq_len=8)
    with pytest.raises(ValueError, match="sequence length"):
        load_tokens(DataConfig(corpus="synthetic:recall"))
    with pytest.raises(ValueError, match=r"data\.recall_buckets"):
        load_tokens(DataConfig(corpus="synthetic:recall", recall_buckets=[4, 128]), seq_len=T)
    with pytest.raises(ValueError, match=r"data\.corpus"):
        DataConfig(corpus="synthetic:nope").validate()
