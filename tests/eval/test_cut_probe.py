"""CutProbe against whole forwards under each cut's plan, computed independently here."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aah.controller.ablation import ProbesCuts, cut_costs
from aah.eval.cut_probe import CutProbe
from aah.model import GPT, GPTConfig

T = 24


def _model(**overrides) -> GPT:
    torch.manual_seed(0)
    shape = dict(n_layer=3, n_head=4, n_kv_head=2, d_model=32, max_seq_len=T)
    return GPT(GPTConfig(**(shape | overrides)))


def _loss_under(model: GPT, plan, windows: torch.Tensor) -> float:
    """Mean next-byte loss of one whole forward over all windows under `plan`."""
    model.set_window_plan(plan)
    with torch.no_grad():
        logits = model.eval()(windows[:, :-1])
    return float(F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()))


def _cuts(model: GPT) -> list[tuple[int, int, int]]:
    cfg = model.config
    return [(l, h, w) for l in range(cfg.n_layer) for h in range(cfg.n_head) for w in (1, 5, 16)]


@pytest.mark.parametrize(
    "overrides",
    [{}, {"n_kv_head": 4, "position": "learned"}, {"n_kv_head": 1, "norm": "rmsnorm"}],
    ids=["gqa-rope", "mha-learned", "mqa-rmsnorm"],
)
def test_cut_losses_equal_whole_forwards_under_each_cut(overrides):
    model = _model(**overrides)
    windows = torch.randint(0, 256, (5, T + 1))
    probe = CutProbe(model, windows, batch_size=2)  # chunks of 2, 2 and 1
    assert isinstance(probe, ProbesCuts)
    cuts = _cuts(model)
    base, losses = probe.cut_losses(cuts)
    full = [[T] * model.config.n_head for _ in range(model.config.n_layer)]
    assert base == pytest.approx(_loss_under(model, full, windows), abs=1e-5)
    expected = []
    for layer, head, window in cuts:
        plan = [row[:] for row in full]
        plan[layer][head] = window
        expected.append(_loss_under(model, plan, windows))
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max(abs(a - base) for a in losses) > 1e-3  # the cuts do change the loss


def test_a_variant_model_takes_the_whole_forward_route_with_the_same_answer():
    model = _model(position="alibi")  # a score bias: not plain softmax
    assert not CutProbe(model, torch.zeros(1, 2, dtype=torch.long), 1)._reusable()
    windows = torch.randint(0, 256, (3, T + 1))
    cuts = [(0, 1, 4), (2, 3, 1)]
    base, losses = CutProbe(model, windows, 2).cut_losses(cuts)
    full = [[T] * 4 for _ in range(3)]
    assert base == pytest.approx(_loss_under(model, full, windows), abs=1e-5)
    for (layer, head, window), loss in zip(cuts, losses, strict=True):
        plan = [row[:] for row in full]
        plan[layer][head] = window
        assert loss == pytest.approx(_loss_under(model, plan, windows), abs=1e-5)


def test_plan_sinks_and_training_mode_are_restored():
    model = _model().train()
    plan = [[3, T, 7, T], [T] * 4, [1, 2, 3, 4]]
    sinks = [[1, 0, 2, 0], [0] * 4, [0, 0, 0, 1]]
    model.set_window_plan(plan, sinks)
    probe = CutProbe(model, torch.randint(0, 256, (2, T + 1)), 2)
    probe.cut_losses([(1, 2, 4)])
    probe(plan)
    assert model.training and model.window_plan() == plan and model.sink_plan() == sinks


def test_cut_costs_through_the_probe_equal_the_plan_by_plan_route():
    model = _model()
    windows = torch.randint(0, 256, (4, T + 1))
    probe = CutProbe(model, windows, 3)
    candidates = [2, 8, T]
    ticks: list[tuple[int, int]] = []
    fast = cut_costs(probe, 3, 4, T, candidates, progress=lambda d, n: ticks.append((d, n)))
    slow = cut_costs(lambda plan: probe(plan), 3, 4, T, candidates)  # a plain function
    assert fast == pytest.approx(slow, abs=1e-5)
    assert ticks[-1] == (24, 24) and np.all(fast[..., -1] == 0)


def test_bad_arguments_name_the_value():
    model = _model()
    with pytest.raises(ValueError, match="windows must be"):
        CutProbe(model, torch.zeros(3, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="batch_size"):
        CutProbe(model, torch.zeros(2, T + 1, dtype=torch.long), 0)
    probe = CutProbe(model, torch.zeros(2, T + 1, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="head 9"):
        probe.cut_losses([(0, 9, 4)])
