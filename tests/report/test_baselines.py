"""Reference lines: unigram and bigram bits/byte against hand-computed values, and the scored
targets against the evaluation's own batches."""

import math

import numpy as np
import pytest
import torch

from aah.data.loader import eval_batches
from aah.report.baselines import fit_and_score, scored_pairs


def test_fit_and_score_by_hand():
    train = np.array([0, 1, 0, 1, 0, 1], dtype=np.uint8)
    base = fit_and_score(train, np.array([[0, 1], [1, 0]]))
    p_uni = {0: 4 / 262, 1: 4 / 262}  # add-one over 256 byte values
    p_1_after_0 = (3 + p_uni[1]) / (3 + 1)  # three 0->1 transitions out of three from 0
    p_0_after_1 = (2 + p_uni[0]) / (2 + 1)  # two 1->0 out of two from 1
    assert base.unigram_bpb == pytest.approx(-math.log2(4 / 262))
    assert base.bigram_bpb == pytest.approx(-(math.log2(p_1_after_0) + math.log2(p_0_after_1)) / 2)
    assert base.n_targets == 2


@pytest.mark.parametrize("layout", ["first", "spread"])
@pytest.mark.parametrize(("batch", "batches"), [(1, 2), (2, 1), (3, 5)])
def test_scored_pairs_are_the_evaluations_targets(batch, batches, layout):
    val = np.arange(23, dtype=np.uint8)
    pairs = scored_pairs(val, 4, batch, batches, layout)
    batches_seen = eval_batches(val, batch, 4, batches, layout=layout)
    xs, ys = zip(*[(x, y) for x, y in batches_seen], strict=True)
    assert pairs[:, 0].tolist() == torch.cat(xs).flatten().tolist()
    assert pairs[:, 1].tolist() == torch.cat(ys).flatten().tolist()
