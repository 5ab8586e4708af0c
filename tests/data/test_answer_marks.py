"""Answer marks beside (x, y) batches: on request only, and only for sources in the window."""

import numpy as np
import pytest
import torch

from aah.data import BatchLoader, eval_batches

TOKENS = np.arange(40, dtype=np.uint8)
ANSWERS = np.zeros(40, dtype=np.int32)
ANSWERS[[3, 9, 10, 17, 20]] = [2, 9, 2, 5, 3]


def test_eval_batches_mark_answers_whose_source_is_in_the_window():
    (x, y, a), (_, _, a2) = list(eval_batches(TOKENS, 2, 8, answers=ANSWERS))
    # windows start at 0, 8, 16, 24: target t of window s is token s + t + 1
    assert a.dtype == torch.int64 and a.shape == x.shape == (2, 8)
    expected = torch.zeros(4, 8, dtype=torch.int64)
    expected[0, 2] = 2  # token 3, source 1: inside window 0 (tokens 0..8)
    # token 9 (source 0) is cut off from window 8; token 10's source 8 is its first token
    expected[1, 1] = 2
    expected[2, 3] = 3  # token 20, source 17; token 17's source 12 is cut off from window 16
    assert torch.equal(torch.cat([a, a2]), expected)
    pairs = list(eval_batches(TOKENS, 2, 8))  # existing callers: still (x, y)
    assert all(len(b) == 2 for b in pairs) and torch.equal(pairs[0][1], y)


def test_batch_loader_returns_marks_on_request_and_pairs_otherwise():
    plain = BatchLoader(TOKENS, 3, 8, seed=1)
    marked = BatchLoader(TOKENS, 3, 8, seed=1, answers=ANSWERS)
    x, y = plain.next_batch()
    x2, y2, a = marked.next_batch(with_answers=True)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    for row in range(3):
        for t in range(8):
            token, d = int(y[row, t]), int(a[row, t])
            inside = ANSWERS[token] and t + 1 - ANSWERS[token] >= 0
            assert d == (ANSWERS[token] if inside else 0)
    with pytest.raises(ValueError, match="with_answers"):
        plain.next_batch(with_answers=True)
    with pytest.raises(ValueError, match="answers"):
        BatchLoader(TOKENS, 3, 8, seed=1, answers=ANSWERS[:5])
