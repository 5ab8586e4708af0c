"""Arguments of a tiny `aah train` run for the report tests."""


def tiny_run_args(corpus, out):
    return ["--out", str(out), "--no-progress", "--data.path", corpus,
            "--model.n_layer", "2", "--model.n_head", "4", "--model.n_kv_head", "2",
            "--model.d_model", "32", "--model.max_seq_len", "32",
            "--train.batch_size", "4", "--train.max_steps", "4", "--train.eval_interval", "2",
            "--train.log_interval", "2", "--train.eval_batches", "1", "--train.threads", "1",
            "--controller.policy", "budget", "--controller.warmup_steps", "0",
            "--controller.interval", "1"]  # fmt: skip
