"""Shuffled twins: the permutations keep every window, the scope says where they move, and
the `Shuffled` wrapper draws them when its name says."""

from __future__ import annotations

import pytest
import torch

from aah.controller import ControllerConfig, make_policy
from aah.controller.shuffle import Shuffled, draw, permute, shuffled, unpermute

PLAN = [[1, 2, 3, 4], [10, 20, 30, 40], [100, 200, 300, 400]]


def test_layer_scope_keeps_each_layers_windows() -> None:
    twin = shuffled(PLAN, torch.Generator().manual_seed(0), "layer")
    assert [sorted(r) for r in twin] == PLAN and twin != PLAN


def test_model_scope_keeps_the_models_windows_and_moves_them_between_layers() -> None:
    twin = shuffled(PLAN, torch.Generator().manual_seed(0), "model")
    assert sorted(w for r in twin for w in r) == sorted(w for r in PLAN for w in r)
    assert any(sorted(a) != sorted(b) for a, b in zip(twin, PLAN, strict=True))
    assert [len(r) for r in twin] == [4, 4, 4]


def test_a_draw_is_the_generators_and_applies_as_drawn() -> None:
    perms = draw(torch.Generator().manual_seed(3), 3, 4, "layer")
    again = draw(torch.Generator().manual_seed(3), 3, 4, "layer")
    assert perms == again
    out = permute(PLAN, perms, "layer")
    assert all(out[l][h] == PLAN[l][perms[l][h]] for l in range(3) for h in range(4))
    flat = draw(torch.Generator().manual_seed(3), 3, 4, "model")[0]
    moved = permute(PLAN, [flat], "model")
    every = [w for r in PLAN for w in r]
    assert [w for r in moved for w in r] == [every[p] for p in flat]


def test_unpermute_undoes_permute() -> None:
    for scope in ("layer", "model"):
        perms = draw(torch.Generator().manual_seed(4), 3, 4, scope)  # type: ignore[arg-type]
        assert unpermute(permute(PLAN, perms, scope), perms, scope) == PLAN  # type: ignore[arg-type]


def test_an_unknown_scope_is_named() -> None:
    with pytest.raises(ValueError, match="scope must be 'layer' or 'model', got 'row'"):
        draw(torch.Generator(), 2, 2, "row")  # type: ignore[arg-type]


# -- the Shuffled wrapper: every policy twin ---------------------------------------------------
DIMS = {"n_layer": 3, "n_head": 4, "n_kv_head": 2, "seq_len": 64}


def _qkv(step: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1000 + step)
    return [
        (
            torch.randn(1, 4, 64, 8, generator=gen) * (1 + h),
            torch.randn(1, 2, 64, 8, generator=gen),
            torch.randn(1, 2, 64, 8, generator=gen),
        )
        for h in range(3)
    ]


def _twin(name: str, **options: object) -> Shuffled:
    cfg = ControllerConfig(name, warmup_steps=2, interval=3, **options)  # type: ignore[arg-type]
    twin = make_policy(cfg, **DIMS)
    assert isinstance(twin, Shuffled)
    return twin


def _drive(twin: Shuffled, steps: range) -> list[tuple[int, object]]:
    """(step, what update returned) for each update, as the training loop calls it."""
    out = []
    for step in steps:
        if twin.wants_update(step):
            out.append(
                (step, twin.update(step, _qkv(step) if twin.wants_activations(step) else None))
            )
    return out


def test_the_wrapped_policy_measures_under_the_plan_the_model_runs() -> None:
    twin = _twin("shuffle")
    moved = False
    for step in range(20):
        _drive(twin, range(step, step + 1))
        assert twin.policy.plan_in_force() == twin.current_plan()  # the permuted plan
        own = twin.policy.current_plan()
        assert [sorted(r) for r in own] == [sorted(r) for r in twin.current_plan()]
        moved |= own != twin.current_plan()
    assert moved


@pytest.mark.parametrize(
    ("name", "options", "redrawn_at_decisions"),
    [("shuffle", {}, False), ("shuffle", {"random_resample": True}, True),
     ("budget-shuffled", {}, True)],
)  # fmt: skip
def test_permutations_are_drawn_once_or_at_each_decision(
    name: str, options: dict, redrawn_at_decisions: bool
) -> None:
    twin = _twin(name, **options)
    perms, changed_at, decisions = None, [], []
    for step in range(30):
        decisions += [step] if twin.wants_update(step) and twin.policy.decides(step) else []
        _drive(twin, range(step, step + 1))
        now = twin.state_dict()["shuffle"]["perms"]
        if perms is not None and now != perms:
            changed_at.append(step)
        perms = now
    assert len(decisions) >= 3
    assert set(changed_at) <= set(decisions)  # never between decisions
    assert bool(changed_at) == redrawn_at_decisions


def test_a_checkpoint_written_before_the_wrapper_resumes_exactly() -> None:
    """Before `Shuffled`, a twin's state held the plan in force as "plan" and its draws as
    "perms" and "aux_rng" / "shuffle_rng" beside the policy's own state."""
    for name, rng_key in (("shuffle", "aux_rng"), ("budget-shuffled", "shuffle_rng")):
        twin = _twin(name)
        _drive(twin, range(10))
        state = twin.state_dict()
        shuffle = state.pop("shuffle")
        legacy = {**state, "plan": shuffle["plan"], rng_key: shuffle["rng"]}
        if name == "shuffle":
            legacy["perms"] = shuffle["perms"]
        resumed = _twin(name)
        resumed.load_state_dict(legacy)
        assert resumed.current_plan() == twin.current_plan()
        if name == "shuffle":  # the policy's own plan is recovered from the permuted one
            assert resumed.policy.current_plan() == twin.policy.current_plan()
        assert _drive(resumed, range(10, 30)) == _drive(twin, range(10, 30))


def test_a_resume_with_other_permutations_and_a_bad_redraw_are_refused() -> None:
    twin = _twin("shuffle")
    other = _twin("shuffle", **{"group_threshold": 0.72})
    state = twin.state_dict()
    state["shuffle"]["perms"] = [list(reversed(p)) for p in state["shuffle"]["perms"]]
    with pytest.raises(ValueError, match="resume with the same seed"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="redraw must be 'once' or 'every-decision', got 'x'"):
        Shuffled(twin.policy, scope="layer", redraw="x", seed=0)  # type: ignore[arg-type]
