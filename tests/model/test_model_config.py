import pytest

from aah.model import GPTConfig


def test_defaults_validate():
    cfg = GPTConfig().validate()
    assert (cfg.vocab_size, cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.d_model) == (
        256,
        4,
        8,
        8,
        256,
    )
    assert cfg.position == "rope" and cfg.backend == "auto" and cfg.head_dim == 32


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"n_layer": 0}, "model.n_layer"),
        ({"vocab_size": -1}, "model.vocab_size"),
        ({"d_model": 100}, "model.d_model"),
        ({"n_kv_head": 3}, "model.n_kv_head"),
        ({"position": "alibi-typo"}, "model.position"),
        ({"attention": "linear-typo"}, "model.attention"),
        ({"dropout": 1.0}, "model.dropout"),
        ({"norm": "batchnorm"}, "model.norm"),
        ({"d_model": 24, "n_head": 8}, "model.position"),  # rope needs an even head dim
        ({"max_seq_len": True}, "model.max_seq_len"),
    ],
)
def test_bad_fields_are_named(changes, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        GPTConfig(**changes).validate()


def test_backend_names_match_the_registry_and_fail_at_validation():
    from aah.attention.registry import BACKENDS
    from aah.model.config import BACKENDS as CONFIG_BACKENDS

    assert set(CONFIG_BACKENDS) == {"auto", *BACKENDS}
    with pytest.raises(ValueError, match=r"model\.backend"):
        GPTConfig(backend="nope").validate()
