"""Policies end to end on small tensors: schedules, seeds, records and state round trips."""

import io
import json

import pytest
import torch

from aah.controller import POLICIES, ControllerConfig, make_policy
from aah.controller.options import OPTIONS_OF, names_of
from aah.controller.protocol import ProbesLoss
from aah.plan import WindowPlan

L, H, HKV, T, D, B = 3, 6, 3, 64, 8, 2
ADAPTIVE = [
    p for p in POLICIES if p.startswith("aah-v3") or p in ("shuffle", "fixed-random-grouping")
]


def qkv(seed, layers=L):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for layer in range(layers):
        # Per-head scales make heads differ, so the hierarchy has something to group.
        s = torch.rand(1, H, 1, 1, generator=gen) * 3 + 0.2
        q = torch.randn(B, H, T, D, generator=gen) * s
        k = torch.randn(B, HKV, T, D, generator=gen) * s[:, ::2]
        v = torch.randn(B, HKV, T, D, generator=gen) * (1 + layer)
        out.append((q, k, v))
    return out


def toy_loss(plan):
    """A stand-in for the model's loss under a plan: head (l, h) costs (l H + h + 1) per
    unit of context it loses, so later heads want wider windows."""
    return sum(
        (l * H + h + 1) * (T - w) / T for l, row in enumerate(plan) for h, w in enumerate(row)
    )


def policy(name, **kw):
    cfg = ControllerConfig(policy=name, warmup_steps=kw.pop("warmup_steps", 0), **kw)
    pol = make_policy(cfg, n_layer=L, n_head=H, n_kv_head=HKV, seq_len=T)
    if isinstance(pol, ProbesLoss):
        pol.attach_probe(toy_loss)
    return pol


def run(pol, steps, seed0=0):
    """Drive `pol` as the training loop does; the plans it returned, in order."""
    plans = []
    for step in steps:
        if pol.wants_update(step):
            seen = qkv(seed0 + step) if pol.wants_activations(step) else None
            plan = pol.update(step, seen)
            if plan is not None:
                plans.append(plan)
    return plans


@pytest.mark.parametrize("name", [p for p in POLICIES if p != "static"])
def test_every_policy_runs_and_records(name, replay_source):
    source = {"replay_from": replay_source(L, H, T)} if name.startswith("replay") else {}
    pol = policy(name, warmup_steps=2, interval=2, random_resample=True, **source)
    assert pol.name == name
    assert pol.current_plan() == pol.initial_plan()
    plans = run(pol, range(7))
    rec = pol.record(6)
    if name != "full":  # a windowed policy has decided by step 6 and cut something
        assert plans and rec["windows"] == plans[-1]
        assert rec["windows"] != [[T] * H for _ in range(L)]
    if name in ADAPTIVE:  # the hierarchy's decisions are recorded, not skipped below
        assert rec["decisions"] is not None
    assert rec["step"] == 6 and rec["policy"] == name
    assert rec["windows"] == pol.current_plan()
    assert len(rec["windows"]) == L and all(len(r) == H for r in rec["windows"])
    assert len(rec["groups"]) == L
    for levels in rec["groups"]:
        for groups in levels:
            assert sorted(h for g in groups for h in g) == list(range(H))
    if rec["decisions"] is not None:
        assert len(rec["decisions"]) == L
        for levels, dec in zip(rec["groups"], rec["decisions"], strict=True):
            assert [len(g) for g in levels] == [len(d) for d in dec]
    json.dumps(rec)  # plain data
    if name not in ("full", "fixed"):
        windows = {T // 8, T // 4, T // 2, T}
        assert all(w in windows for row in rec["windows"] for w in row)


def test_warmup_and_schedule():
    pol = policy("aah-v3-full-adaptive", warmup_steps=10, interval=5)
    assert pol.initial_plan() == [[T] * H] * L
    calls, observed, decided = [], [], []
    for step in range(26):
        if pol.wants_update(step):
            calls.append(step)
            seen = qkv(step) if pol.wants_activations(step) else None
            observed += [step] if seen is not None else []
            if pol.update(step, seen) is not None:
                decided.append(step)
    # step 0 caches level 0 and the feature EMA; the step before a decision measures attention
    assert observed == [0, 9, 10, 14, 15, 19, 20, 24, 25]
    assert decided == [10, 15, 20, 25]
    assert calls == observed  # 4 candidates, window EMA 0.15: it never moves the plan
    assert not any(policy("full").wants_update(s) for s in range(200))
    assert not any(policy("random").wants_update(s) for s in range(200))
    assert policy("random", random_resample=True, interval=3).wants_update(3)


@pytest.mark.parametrize("name", ["fixed", "random", "budget", "aah-v3-full-adaptive"])
def test_every_windowed_policy_takes_the_same_warmup(name):
    """Controls are matched: full attention through step 10, windowed from step 11 on."""
    pol = policy(name, warmup_steps=10, interval=5)
    in_force = {}
    plan = pol.initial_plan()
    for step in range(14):
        in_force[step] = plan
        if pol.wants_update(step):
            seen = qkv(step) if pol.wants_activations(step) else None
            plan = pol.update(step, seen) or plan
    assert all(in_force[s] == [[T] * H] * L for s in range(11))
    assert in_force[11] != [[T] * H] * L or name == "aah-v3-full-adaptive"
    old = policy(name, warmup_steps=10, windowed_from_start=True)
    if name in ("fixed", "random"):
        assert old.initial_plan() != [[T] * H] * L  # the old behaviour, on request


def test_budget_shuffled_matches_budget_coverage_per_layer():
    budget, shuffled = policy("budget", interval=1), policy("budget-shuffled", interval=1)
    differs = False
    for step in range(4):
        a, b = budget.update(step, qkv(step)), shuffled.update(step, qkv(step))
        assert [sorted(r) for r in a] == [sorted(r) for r in b]
        differs |= a != b
    assert differs  # the assignment to heads is what changes


def test_policy_runs_the_layer_controllers_one_step_late_on_the_same_inputs():
    """The plan in force at step s + 1 is what the per-forward controller decides at s,
    from Q/K/V of s and the attention statistics of s - 1 under the plan then in force."""
    from aah.controller.aahv3 import LayerInputs
    from aah.controller.head_stats import attention_stats

    kw = {"warmup_steps": 3, "interval": 2, "window_ema": 0.6, "windows": [4, 8, 16, 32, 64]}
    pol = policy("aah-v3-full-adaptive", **kw)
    twin = policy("aah-v3-full-adaptive", **kw)._layers  # same seed: same frozen scorers
    plan, prev_plan = pol.initial_plan(), None
    for step in range(12):
        expect = []
        for layer, ctl in enumerate(twin):
            attn = None
            if step > 0:
                q, k, v = qkv(step - 1)[layer]
                attn = attention_stats(q, k, v, prev_plan[layer])
            idx = ctl.forward(step, LayerInputs(*qkv(step)[layer], attn))
            expect.append(None if idx is None else [pol.windows[i] for i in idx])
        prev_plan = plan
        if pol.wants_update(step):
            seen = qkv(step) if pol.wants_activations(step) else None
            plan = pol.update(step, seen) or plan
        if expect[0] is not None:
            assert plan == expect, step
        else:
            assert plan == [[T] * H] * L


def test_random_same_seed_same_plans_different_seed_differs():
    a = policy("random", seed=1, random_resample=True)
    b = policy("random", seed=1, random_resample=True)
    c = policy("random", seed=2, random_resample=True)
    assert a.initial_plan() == b.initial_plan() != c.initial_plan()
    assert run(a, range(0, 20, 5)) == run(b, range(0, 20, 5)) != run(c, range(0, 20, 5))
    once = policy("random", seed=1)
    first = once.initial_plan()
    assert first == a.initial_plan()
    assert once.update(5, qkv(0)) == first  # drawn once: updates keep it


def test_random_is_uniform_over_candidates():
    cfg = ControllerConfig(policy="random", windows=[3, 5, 9], warmup_steps=0)
    pol = make_policy(cfg, n_layer=40, n_head=30, n_kv_head=30, seq_len=T)
    flat = [w for row in pol.initial_plan() for w in row]
    for w in (3, 5, 9):
        assert abs(flat.count(w) / len(flat) - 1 / 3) < 0.03


@pytest.mark.parametrize("name", [*ADAPTIVE, "budget", "random"])
def test_state_dict_round_trip_continues_identically(name):
    a = policy(name, interval=1, random_resample=True, window_ema=0.3)
    run(a, range(3))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = policy(name, interval=1, random_resample=True, window_ema=0.3, seed=99)
    b.load_state_dict(torch.load(buf, weights_only=False))
    assert b.current_plan() == a.current_plan()
    for step in range(3, 7):
        pa, pb = a.update(step, qkv(step)), b.update(step, qkv(step))
        assert pa == pb
        ra, rb = a.record(step), b.record(step)
        assert ra == rb


def test_same_seed_same_adaptive_plans():
    assert run(policy("aah-v3-full-adaptive"), range(4)) == run(
        policy("aah-v3-full-adaptive"), range(4)
    )


def test_shuffle_permutes_full_adaptive_windows_within_layers():
    base = run(policy("aah-v3-full-adaptive"), range(3))
    shuf = run(policy("shuffle"), range(3))
    for p_base, p_shuf in zip(base, shuf, strict=True):
        for row_b, row_s in zip(p_base, p_shuf, strict=True):
            assert sorted(row_b) == sorted(row_s)


def test_regime_topologies():
    shallow = policy("aah-v3-shallow-freeze")
    reuse = policy("aah-v3-deep-reuse")
    fixed = policy("fixed-random-grouping", min_group_size=2)
    off = policy("aah-v3-grouping-off")
    first = {}
    for step in range(4):
        for pol in (shallow, reuse, fixed, off):
            pol.update(step, qkv(100 * step))
            groups = pol.record(step)["groups"]
            level0 = [layer[0] for layer in groups]
            first.setdefault(pol.name, level0)
            assert level0 == first[pol.name]  # level-0 map fixed after the first update
            if pol is shallow:
                assert all(len(layer) == 1 for layer in groups)
    assert all(len(g) >= 2 for layer in first["fixed-random-grouping"] for g in layer)
    assert first["aah-v3-grouping-off"] == [[[h] for h in range(H)]] * L
    assert all(len(d) == 1 and len(d[0]) == H for d in off.record(3)["decisions"])


def test_recorded_decisions_respect_the_parent_constraint():
    pol = policy("aah-v3-full-adaptive", interval=1, min_group_size=1, group_threshold=0.99)
    for step in range(3):
        pol.update(step, qkv(step))
        rec = pol.record(step)
        for levels, dec in zip(rec["groups"], rec["decisions"], strict=True):
            for lower in range(len(levels) - 1):
                for g, heads in enumerate(levels[lower]):
                    parent = next(p for p, hs in enumerate(levels[lower + 1]) if heads[0] in hs)
                    assert dec[lower][g] <= dec[lower + 1][parent]


def test_without_feature_ema_only_the_latest_features_count():
    from aah.controller.head_stats import head_features, qkv_head_stats

    off = policy("aah-v3-full-adaptive", use_feature_ema=False, interval=1)
    on = policy("aah-v3-full-adaptive", interval=1)
    for pol in (off, on):
        run(pol, range(3))
    attn = off._pending[0]
    off.update(3, qkv(3))
    latest = head_features(qkv_head_stats(*qkv(3)[0]), attn)
    assert torch.equal(off.state_dict()["layers"][0]["feature_ema"], latest)
    on.update(3, qkv(3))
    assert not torch.equal(on.state_dict()["layers"][0]["feature_ema"], latest)


def test_ablation_switches_change_the_controller():
    from aah.controller.adaptive import settings_for

    base = settings_for(ControllerConfig(policy="aah-v3-full-adaptive"))
    assert base.parent_constraint and base.joint_scoring and base.feature_ema == 0.9
    base_plans = run(policy("aah-v3-full-adaptive", interval=1), range(6))
    for kw, field, value in (
        ({"parent_constraint": False}, "parent_constraint", False),
        ({"joint_scoring": False}, "joint_scoring", False),
        ({"use_feature_ema": False}, "feature_ema", 0.0),
        # above 0.5 any change of proposal is smoothed (0.3 needs a jump of two windows)
        ({"window_ema": 0.6}, "window_ema", 0.6),
    ):
        cfg = ControllerConfig(policy="aah-v3-full-adaptive", **kw)
        assert getattr(settings_for(cfg), field) == value
        plans = run(policy("aah-v3-full-adaptive", interval=1, **kw), range(6))
        assert len(plans) == 6 and plans != base_plans, f"{kw} left the plans unchanged"
    shallow = settings_for(ControllerConfig(policy="aah-v3-shallow-freeze", max_depth=4))
    assert shallow.rule.max_depth == 1 and shallow.regime == "shallow-freeze"


def test_fixed_and_full_plans():
    assert policy("full").initial_plan() == [[T] * H] * L
    assert policy("fixed").initial_plan() == [[T // 4] * H] * L
    assert policy("fixed", fixed_window=7).update(0, qkv(0)) == [[7] * H] * L


def test_static_plan_file_round_trip(tmp_path):
    plan = [[1, 2, 3, 4, 5, 6], [6] * 6, [64] * 6]
    export = tmp_path / "plan.json"
    WindowPlan.of(plan, step=10).save(export)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(plan))
    assert WindowPlan.load(export).windows == WindowPlan.load(bare).windows == plan
    assert json.loads(export.read_text())["step"] == 10
    pol = policy("static", static_plan=str(export))
    assert pol.initial_plan() == plan and not pol.wants_update(100)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([[1, 2]]))
    with pytest.raises(ValueError, match="static_plan"):
        policy("static", static_plan=str(bad))
    sunk = tmp_path / "sinks.json"
    WindowPlan.of(plan, 4).save(sunk)  # training runs no sinks: refused, not dropped
    with pytest.raises(ValueError, match="attention sinks, which training does not run"):
        policy("static", static_plan=str(sunk))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("policy", "nope"),
        ("windows", [0, 4]),
        ("windows", []),
        ("budget", 0.0),
        ("budget", 1.5),
        ("interval", 0),
        ("feature_ema", 1.0),
        ("window_ema", -0.1),
        ("warmup_steps", -1),
        ("min_group_size", 0),
        ("max_depth", 0),
        ("sample_queries", 0),
        ("fixed_window", 0),
        ("stickiness", -1.0),
        ("norm_penalty", float("nan")),
        ("group_threshold", float("inf")),
        ("joint_scoring", 1),
        ("static_plan", None),
        ("feature_rows", -1),
        ("usage", "mean"),
        ("grouping_seed", 1.5),
        ("windowed_from_start", 1),
    ],
)
def test_bad_config_raises_naming_the_field(field, value):
    # Each option checked under a policy that reads it (options are the policy's own).
    reader = next((p for p, cls in OPTIONS_OF.items() if field in names_of(cls)), "full")
    kw = {field: value} if field == "policy" else {"policy": reader, field: value}
    cfg = ControllerConfig(**kw)
    with pytest.raises(ValueError, match=field) as err:
        cfg.validate(T)
    assert repr(value) in str(err.value) or field == "windows"
    with pytest.raises(ValueError, match=field):
        make_policy(cfg, n_layer=1, n_head=2, n_kv_head=1, seq_len=T)


def test_bad_dimensions_raise():
    with pytest.raises(ValueError, match="n_kv_head"):
        make_policy(ControllerConfig(), n_layer=1, n_head=6, n_kv_head=4, seq_len=T)
    pol = policy("aah-v3-full-adaptive")
    with pytest.raises(ValueError, match="layers"):
        pol.update(0, qkv(0, layers=2))


def test_captured_attention_outputs_give_the_same_decisions():
    """The loop passes each forward's attention output (`GPT`'s 4th captured item); the
    policy's statistics from it equal those of its own full pass, and so do its plans."""
    from aah.attention import windowed_attention

    def with_outputs(pol, step):
        acts = qkv(step)
        plan = pol.current_plan()
        return [
            (q, k, v, windowed_attention(q, k, v, tuple(w)))
            for (q, k, v), w in zip(acts, plan, strict=True)
        ]

    plain, fed = policy("aah-v3-full-adaptive"), policy("aah-v3-full-adaptive")
    for step in range(12):
        if not plain.wants_update(step):
            continue
        seen = qkv(step) if plain.wants_activations(step) else None
        given = with_outputs(fed, step) if fed.wants_activations(step) else None
        assert plain.update(step, seen) == fed.update(step, given)
        if plain._pending is not None:
            for a, b in zip(plain._pending, fed._pending, strict=True):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert plain.current_plan() == fed.current_plan()
