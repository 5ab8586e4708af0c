"""`ControllerConfig`: the fields every policy reads, and each policy's own options."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aah.controller import POLICIES, ControllerConfig, make_policy
from aah.controller.options import (
    OPTIONS_OF,
    AblationOptions,
    AdaptiveOptions,
    BudgetOptions,
    Options,
    ReplayOptions,
    names_of,
    option_types,
)
from aah.training.run_config import RunConfig

ROOT = Path(__file__).resolve().parents[2]


def test_every_policy_has_options_and_every_option_one_type_and_default() -> None:
    assert set(OPTIONS_OF) == set(POLICIES)
    seen: dict[str, tuple[object, object]] = {}
    for cls in OPTIONS_OF.values():
        for f in dataclasses.fields(cls):
            kind = (option_types()[f.name], f.default)
            assert seen.setdefault(f.name, kind) == kind, f.name  # one meaning per name


def test_the_config_holds_only_what_every_policy_reads() -> None:
    # The bar: no field of ControllerConfig that only some policies read.
    config = ControllerConfig("budget", warmup_steps=7, seed=3, budget=0.5, interval=9)
    assert set(vars(config)) == {"policy", "warmup_steps", "seed", "_given"}
    assert config.options == BudgetOptions(budget=0.5, interval=9)
    own = dataclasses.asdict(BudgetOptions(budget=0.5, interval=9))
    assert config.to_dict() == {"policy": "budget", "warmup_steps": 7, "seed": 3, **own}
    assert "group_threshold" not in config.to_dict()  # an AAH-v3 option: not budget's
    assert list(ControllerConfig().to_dict()) == ["policy", "warmup_steps", "seed"]


def test_an_option_of_another_policy_is_kept_aside_and_taken_up_by_a_policy_that_reads_it() -> None:
    config = ControllerConfig("aah-v3-full-adaptive", budget=0.6, ablation_windows=4,
                              sample_queries=64)  # fmt: skip
    assert config.unused() == ["ablation_windows", "budget"]  # 64 is the default: no news
    assert isinstance(config.options, AdaptiveOptions)
    config.set("policy", "loss-ablation")
    assert config.options == AblationOptions(budget=0.6, ablation_windows=4)
    assert config.unused() == []
    with pytest.raises(ValueError, match=r"unknown config key 'controller.bugdet'"):
        config.set("bugdet", 0.3)
    with pytest.raises(TypeError, match="reads AblationOptions, not ReplayOptions"):
        config.options_as(ReplayOptions)


def test_a_cell_written_when_every_option_was_a_field_loads_and_rebuilds_the_same_policy() -> None:
    old = RunConfig.from_toml(ROOT / "results/text/budget-s0/cell.toml")  # all 27 keys flat
    ctrl = old.controller
    assert ctrl.policy == "budget" and ctrl.warmup_steps == 400 and ctrl.seed == 0
    assert ctrl.options == BudgetOptions(interval=25, budget=0.3)
    back = RunConfig.from_dict(old.to_dict())
    assert back.controller == ctrl and back.to_toml() == old.to_toml()
    assert "group_threshold" not in old.to_toml()  # written back with budget's options only
    make_policy(ctrl, n_layer=2, n_head=8, n_kv_head=8, seq_len=1024)


def test_cli_overrides_route_to_the_options_in_any_order() -> None:
    config = RunConfig().override([("controller.budget", "0.4"), ("controller.policy", "budget"),
                                   ("controller.windows", "8,16")])  # fmt: skip
    assert config.controller.options == BudgetOptions(budget=0.4, windows=[8, 16])
    with pytest.raises(ValueError, match=r"controller\.budget"):
        RunConfig().override([("controller.budget", "x")])


@pytest.mark.parametrize("cls", dict.fromkeys(OPTIONS_OF.values()))
def test_each_options_class_documents_itself(cls: type[Options]) -> None:
    assert cls.__doc__ and cls.__doc__.strip()
    assert all(name in option_types() for name in names_of(cls))
