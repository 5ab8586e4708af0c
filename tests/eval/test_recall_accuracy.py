"""Recall accuracy against a hand-computed case."""

import torch

from aah.eval.recall_accuracy import RecallCounter


def test_accuracy_overall_and_per_bucket_by_hand():
    # one row of 6 targets; argmax predictions come from one-hot logits
    pred = torch.tensor([[5, 1, 2, 3, 4, 9]])
    target = torch.tensor([[5, 1, 7, 3, 0, 9]])
    marks = torch.tensor([[0, 4, 6, 20, 30, 100]])  # 0: not an answer; 100: in no bucket
    logits = torch.nn.functional.one_hot(pred, 10).float()
    counter = RecallCounter([(4, 8), (8, 16), (16, 32)])
    counter.add(logits, target, marks)
    counter.add(logits, target, torch.zeros_like(marks))  # no answers: changes nothing
    out = counter.result()
    # answers: targets 1 (right), 2 (wrong), 3 (right), 4 (wrong), 5 (right) -> 3 / 5
    assert out["val_answers"] == 5
    assert out["val_acc"] == 3 / 5
    assert out["val_acc_by_distance"] == {"4-7": 1 / 2, "8-15": None, "16-31": 1 / 2}
    assert RecallCounter([(4, 8)]).result()["val_acc"] is None
