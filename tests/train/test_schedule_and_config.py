import math

import pytest

from aah.training.config import TrainConfig
from aah.training.run_config import RunConfig
from aah.training.schedule import learning_rate


def test_schedule_warmup_then_cosine_to_floor():
    cfg = TrainConfig(max_steps=100, warmup_steps=10, lr=1e-3, min_lr=1e-4)
    assert learning_rate(0, cfg) == pytest.approx(1e-4)
    assert learning_rate(9, cfg) == pytest.approx(1e-3)
    assert learning_rate(10, cfg) == pytest.approx(1e-3)
    assert learning_rate(55, cfg) == pytest.approx(1e-4 + 0.5 * 9e-4)
    assert learning_rate(100, cfg) == pytest.approx(1e-4)
    longer = TrainConfig(max_steps=50, decay_steps=100, warmup_steps=10, lr=1e-3, min_lr=1e-4)
    assert learning_rate(30, longer) == learning_rate(30, cfg)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_steps": 0}, "train.max_steps"),
        ({"lr": -1.0}, "train.lr"),
        ({"min_lr": 1.0}, "train.min_lr"),
        ({"device": "tpu"}, "train.device"),
        ({"beta2": 1.0}, "train.beta2"),
        ({"grad_accum": 0}, "train.grad_accum"),
    ],
)
def test_train_config_names_bad_field(changes, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        TrainConfig(**changes).validate()


def test_toml_round_trip(tmp_path):
    config = RunConfig().override(
        [
            ("model.n_layer", "6"),
            ("train.lr", "0.002"),
            ("data.max_bytes", "1000000"),
            ("controller.windows", "64,128,256,1024"),
            ("controller.policy", "budget"),
            ("controller.use_feature_ema", "false"),
            ("data.path", 'we"ird\\path'),
        ]
    )
    path = tmp_path / "c.toml"
    path.write_text(config.to_toml())
    back = RunConfig.from_toml(path)
    assert back == config
    assert back.controller.options.windows == [64, 128, 256, 1024] and back.model.n_layer == 6
    assert back.data.path == 'we"ird\\path'


def test_override_types():
    config = RunConfig().override(
        [
            ("train.max_steps", "200"),
            ("train.lr", "3e-4"),
            ("controller.fixed_window", "none"),
            ("data.max_bytes", "2_000_000"),
            ("controller.windows", "[32, 64]"),
            ("controller.random_resample", "yes"),
        ]
    )
    assert config.train.max_steps == 200 and math.isclose(config.train.lr, 3e-4)
    assert config.data.max_bytes == 2_000_000
    ctrl = config.controller  # options are read by the policy that owns them
    ctrl.policy = "random"
    assert ctrl.options.windows == [32, 64] and ctrl.options.random_resample is True
    ctrl.policy = "fixed"
    assert ctrl.options.fixed_window is None


@pytest.mark.parametrize(
    ("pair", "named"),
    [
        (("model.n_layers", "6"), "model.n_layers"),
        (("optim.lr", "1"), "optim.lr"),
        (("train.max_steps", "ten"), "train.max_steps"),
        (("train.lr", "fast"), "train.lr"),
        (("controller.windows", "1,x"), r"controller.windows\[1\]"),
        (("controller.use_feature_ema", "maybe"), "controller.use_feature_ema"),
        (("model", "6"), "model"),
    ],
)
def test_bad_overrides_name_the_key(pair, named):
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        RunConfig().override([pair])


def test_bad_toml_names_section_and_key(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[model]\nn_layer = 2\n[optimizer]\nlr = 1.0\n")
    with pytest.raises(ValueError, match="optimizer"):
        RunConfig.from_toml(path)
    path.write_text("[train]\nmax_stepz = 2\n")
    with pytest.raises(ValueError, match=r"train\.max_stepz"):
        RunConfig.from_toml(path)
    path.write_text("[train]\nmax_steps = 'two'\n")
    with pytest.raises(ValueError, match=r"train\.max_steps"):
        RunConfig.from_toml(path)


@pytest.mark.parametrize("text", ["inf", "nan", "-inf", "1e999"])
@pytest.mark.parametrize(
    "key",
    ["train.lr", "train.grad_clip", "model.rope_base", "data.val_fraction", "controller.budget"],
)
def test_non_finite_numbers_are_rejected_naming_the_field(key, text):
    with pytest.raises(ValueError, match=key.replace(".", r"\.") + ".*finite"):
        RunConfig().override([(key, text)]).validate()


def test_non_finite_values_fail_validation(tmp_path):
    with pytest.raises(ValueError, match=r"train\.lr.*finite"):
        TrainConfig(lr=math.inf).validate()
    config = RunConfig()
    config.model.rope_base = math.inf
    with pytest.raises(ValueError, match=r"model\.rope_base.*finite"):
        config.validate()
    config = RunConfig()
    config.data.val_fraction = math.nan
    with pytest.raises(ValueError, match=r"data\.val_fraction.*finite"):
        config.validate()
    path = tmp_path / "c.toml"
    path.write_text("[train]\nlr = inf\n")
    with pytest.raises(ValueError, match=r"train\.lr.*finite"):
        RunConfig.from_toml(path)
