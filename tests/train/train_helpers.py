"""A tiny training config shared by the loop tests."""

from aah.train.run_config import RunConfig


def tiny_config(corpus: str, **overrides: str) -> RunConfig:
    config = RunConfig()
    config.override(
        [
            ("data.path", corpus),
            ("model.n_layer", "2"),
            ("model.n_head", "4"),
            ("model.n_kv_head", "2"),
            ("model.d_model", "32"),
            ("model.max_seq_len", "32"),
            ("train.batch_size", "4"),
            ("train.max_steps", "30"),
            ("train.warmup_steps", "5"),
            ("train.lr", "3e-3"),
            ("train.log_interval", "5"),
            ("train.eval_interval", "10"),
            ("train.eval_batches", "4"),
            ("train.checkpoint_interval", "7"),
            ("train.threads", "1"),
            *overrides.items(),
        ]
    )
    return config
