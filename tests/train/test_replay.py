"""Replaying a finished run's plans: the exact replay retrains the source bit for bit, the
shuffled replay holds each layer's windows on other heads at every step, and bad sources
are refused with errors that name them."""

import json

import pytest
import torch
from train_helpers import assert_resume_is_bit_for_bit, metrics, tiny_config

from aah.controller import make_policy
from aah.controller.config import ControllerConfig
from aah.training.checkpoint import load_checkpoint
from aah.training.loop import train

SOURCE = {
    "train.max_steps": "20",
    "train.log_interval": "1",
    "train.eval_interval": "10",
    "controller.warmup_steps": "3",
    "controller.interval": "2",
    "controller.min_group_size": "1",
    "model.dropout": "0.1",  # the replay must consume the training RNG exactly as the source
}
DIMS = {"n_layer": 2, "n_head": 4, "n_kv_head": 2, "seq_len": 32}


def _plans(run):
    return [json.loads(line) for line in (run / "plans.jsonl").read_text().splitlines()]


def _train(corpus, run, **overrides):
    train(tiny_config(corpus, **SOURCE, **overrides), run, progress=False)
    return run


@pytest.fixture(scope="module")
def source(tmp_path_factory, tiny_corpus):
    """A finished aah-v3-full-adaptive run whose plans change several times."""
    run = tmp_path_factory.mktemp("replay") / "source"
    _train(tiny_corpus, run, **{"controller.policy": "aah-v3-full-adaptive"})
    assert len({json.dumps(p["windows"]) for p in _plans(run)}) > 2
    return run


@pytest.mark.parametrize("policy", ["aah-v3-full-adaptive", "loss-ablation"])
def test_exact_replay_retrains_the_source_bit_for_bit(tmp_path, tiny_corpus, policy):
    src = _train(tiny_corpus, tmp_path / "src", **{"controller.policy": policy})
    replay = _train(
        tiny_corpus,
        tmp_path / "replay",
        **{"controller.policy": "replay", "controller.replay_from": str(src)},
    )
    a = load_checkpoint(src / "checkpoints" / "last.pt")["model"]
    b = load_checkpoint(replay / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(a[name], b[name]) for name in a)
    drop = {"policy"}  # the summary line names the policy; nothing else may differ
    strip = [{k: v for k, v in r.items() if k not in drop} for r in metrics(src / "metrics.jsonl")]
    got = [{k: v for k, v in r.items() if k not in drop} for r in metrics(replay / "metrics.jsonl")]
    assert got == strip
    assert [(p["step"], p["windows"]) for p in _plans(replay)] == [
        (p["step"], p["windows"]) for p in _plans(src)
    ]


def _twin(tmp_path, corpus, source, policy):
    """Trains `policy` on the source's plans: the source's and the twin's plans.jsonl records,
    and each run's (step, logged causal coverage)."""
    twin = _train(
        corpus,
        tmp_path / "twin",
        **{"controller.policy": policy, "controller.replay_from": str(source)},
    )
    src_plans, twin_plans = _plans(source), _plans(twin)
    assert [p["step"] for p in twin_plans] == [p["step"] for p in src_plans]
    cov = [
        [(r["step"], r["causal_coverage"]) for r in metrics(run / "metrics.jsonl")]
        for run in (source, twin)
    ]
    return list(zip(src_plans, twin_plans, strict=True)), cov


def _built(source, name, seed):
    cfg = ControllerConfig(policy=name, replay_from=str(source), seed=seed)
    return make_policy(cfg, **DIMS)


def _drawn(source, name, seed=3):
    """The permutations the replay policy `name` draws on the source's plans, the plans it
    puts in force at the source's steps, and the source's own plans."""
    schedule = [p["windows"] for p in _plans(source)]
    steps = [p["step"] for p in _plans(source)]
    policy = _built(source, name, seed)
    plans = [policy.initial_plan()] + [policy.update(s, None) for s in steps[1:]]
    assert [policy.wants_update(s) for s in range(25)] == [s in steps[1:] for s in range(25)]
    perms = policy.state_dict()["shuffle"]["perms"]
    assert (
        _built(source, name, seed).state_dict()["shuffle"]["perms"] == perms
    )  # seeded: the same draw
    assert _built(source, name, seed + 1).state_dict()["shuffle"]["perms"] != perms
    return perms, plans, schedule


def test_shuffled_replay_permutes_each_layer_once_and_keeps_every_step_coverage(
    tmp_path, tiny_corpus, source
):
    pairs, (src_cov, twin_cov) = _twin(tmp_path, tiny_corpus, source, "replay-shuffled")
    for s, t in pairs:
        for srow, trow in zip(s["windows"], t["windows"], strict=True):
            assert sorted(srow) == sorted(trow)  # the same windows in every layer, every step
    assert any(s["windows"] != t["windows"] for s, t in pairs)
    assert twin_cov == src_cov  # the logged coverage of every step, to the last digit


def test_shuffled_replay_draws_one_permutation_per_layer_from_its_seed(source):
    perms, plans, schedule = _drawn(source, "replay-shuffled")
    assert sorted(perms[0]) == list(range(4)) and sorted(perms[1]) == list(range(4))
    expected = [
        [[row[p] for p in perm] for row, perm in zip(w, perms, strict=True)] for w in schedule
    ]
    assert plans == expected


def test_scattered_replay_moves_windows_across_layers_and_keeps_every_step_coverage(
    tmp_path, tiny_corpus, source
):
    pairs, (src_cov, twin_cov) = _twin(tmp_path, tiny_corpus, source, "replay-scattered")
    for s, t in pairs:
        flat = [sorted(w for row in r["windows"] for w in row) for r in (s, t)]
        assert flat[0] == flat[1]  # the model's windows, every step
    # some step splits the context between the layers differently from the source
    assert any(
        sorted(srow) != sorted(trow)
        for s, t in pairs
        for srow, trow in zip(s["windows"], t["windows"], strict=True)
    )
    assert [s for s, _ in twin_cov] == [s for s, _ in src_cov]
    assert all(abs(a - b) < 1e-12 for (_, a), (_, b) in zip(twin_cov, src_cov, strict=True))


def test_scattered_replay_draws_one_permutation_over_every_head_from_its_seed(source):
    (perm,), plans, schedule = _drawn(source, "replay-scattered")
    assert sorted(perm) == list(range(8))  # 2 layers x 4 heads, flat index layer * 4 + head
    for windows, plan in zip(schedule, plans, strict=True):
        flat = windows[0] + windows[1]
        assert plan == [[flat[p] for p in perm[:4]], [flat[p] for p in perm[4:]]]


@pytest.mark.parametrize("policy", ["replay-shuffled", "replay-scattered"])
def test_permuted_replay_resumes_bit_for_bit(tmp_path, tiny_corpus, source, policy):
    extra = {k: v for k, v in SOURCE.items() if k != "train.max_steps"}
    extra |= {"controller.policy": policy, "controller.replay_from": str(source)}
    extra["train.decay_steps"] = "20"  # the lr schedule of the first half must be the whole's
    assert_resume_is_bit_for_bit(tmp_path, tiny_corpus, extra, total=20, first=10)


def _write(run, lines, finished=True, summary="{}"):
    run.mkdir()
    (run / "plans.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if finished:
        (run / "summary.json").write_text(summary)
    return str(run)


FULL = [[32] * 4, [32] * 4]


@pytest.mark.parametrize(
    ("lines", "finished", "match"),
    [
        ([{"step": 0, "windows": FULL}], False, "is not a finished run"),
        ([], True, "must start with the step-0 plan"),
        ([{"step": 5, "windows": FULL}], True, "must start with the step-0 plan"),
        (
            [
                {"step": 0, "windows": FULL},
                {"step": 4, "windows": FULL},
                {"step": 4, "windows": FULL},
            ],
            True,
            "steps must increase, record 2 has step 4 after 4",
        ),
        ([{"step": 0, "windows": [[32] * 4]}], True, "record 0: plan has 1 layers"),
        ([{"step": 0, "windows": [[32] * 4, [64] * 4]}], True, "window 64 > T = 32"),
        ([{"step": -1, "windows": FULL}], True, "record 0 has step -1"),
    ],
)
def test_a_bad_source_is_refused_by_name(tmp_path, lines, finished, match):
    path = _write(tmp_path / "src", lines, finished)
    with pytest.raises(ValueError, match=match) as err:
        make_policy(ControllerConfig(policy="replay", replay_from=path), **DIMS)
    assert path in str(err.value)


def test_a_source_trained_at_another_length_is_refused(tmp_path):
    path = _write(tmp_path / "src", [{"step": 0, "windows": FULL}], summary='{"seq_len": 64}')
    with pytest.raises(ValueError, match="was trained at T = 64, this run has T = 32"):
        make_policy(ControllerConfig(policy="replay", replay_from=path), **DIMS)


def test_replay_without_a_source_is_a_config_error():
    with pytest.raises(ValueError, match=r"controller\.replay_from must name a finished run"):
        ControllerConfig(policy="replay-shuffled").validate()
