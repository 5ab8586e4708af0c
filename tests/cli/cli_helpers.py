"""Arguments of a tiny `aah train` run, shared by the command-line tests."""


def tiny_args(corpus, out, steps=12):
    return [
        "--out",
        str(out),
        "--no-progress",
        "--data.path",
        corpus,
        "--model.n_layer",
        "2",
        "--model.n_head",
        "4",
        "--model.n_kv_head",
        "2",
        "--model.d_model",
        "32",
        "--model.max_seq_len",
        "32",
        "--train.batch_size",
        "4",
        "--train.max_steps",
        str(steps),
        "--train.eval_interval",
        "6",
        "--train.log_interval",
        "3",
        "--train.eval_batches",
        "2",
        "--train.threads",
        "1",
    ]
