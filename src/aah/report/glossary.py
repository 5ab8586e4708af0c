"""Units and one-line definitions of every number the reports and run files show.

`describe(key)` gives "unit: definition" for a summary.json / metrics.jsonl / results CSV
key; the run report shows it beside each value, the suite report as a definitions list.
"""

from __future__ import annotations

#: key -> (unit, one-line definition). Unit "" for counts, names and plain fractions.
TERMS: dict[str, tuple[str, str]] = {
    "val_loss": ("nats/byte", "mean next-byte cross-entropy on the validation split"),
    "val_bpb": ("bits/byte", "val_loss / ln 2: validation bits per byte (lower is better)"),
    "train_loss": ("nats/byte", "mean training cross-entropy since the previous log line"),
    "loss": ("nats/byte", "mean next-byte cross-entropy of the text scored"),
    "bpb": ("bits/byte", "loss / ln 2 of the text scored"),
    "val_acc": ("fraction", "recall accuracy at the answer bytes of a generated task"),
    "val_acc_by_distance": ("fraction", "recall accuracy per answer-distance bucket [lo, hi)"),
    "val_acc_far": ("fraction", "recall accuracy in the farthest distance bucket with answers"),
    "far_bucket": ("bytes", "the farthest distance bucket with answers"),
    "val_answers": ("answers", "answer bytes scored for recall accuracy"),
    "acr": ("fraction", "ACR: mean over heads of min(w, T) / T (the paper's routing diagnostic)"),
    "causal_coverage": (
        "fraction",
        "allowed query-key pairs over those of full causal attention (the ideal cost ratio)",
    ),
    "coverage": ("fraction", "causal coverage: allowed query-key pairs over full causal"),
    "executed_ratio": (
        "fraction",
        "score elements the backend really computes over the full causal count",
    ),
    "executed_backend": ("", "the backend the executed ratio is counted for"),
    "train_tokens_per_s": ("tokens/s", "training tokens over training seconds (excl. eval)"),
    "tokens_per_s": ("tokens/s", "training tokens per second over the last log window"),
    "eval_tokens_per_s": ("tokens/s", "evaluation forward tokens per second"),
    "ctrl_s": ("s", "seconds spent in the window controller (its updates, not the model)"),
    "ctrl_share": ("fraction", "controller seconds over training-step seconds"),
    "peak_rss_mb": ("MiB", "peak resident memory of the process"),
    "wall_s": ("s", "wall-clock seconds of the run, over every resume, eval included"),
    "train_s": ("s", "seconds in training steps, over every resume, eval excluded"),
    "lr": ("", "learning rate of the step"),
    "tokens": ("tokens", "training tokens seen (batch x length x accumulation x ranks)"),
    "steps": ("steps", "optimizer steps completed"),
    "step": ("steps", "optimizer steps completed when the line was written"),
    "seed": ("", "the run's seed (data order, initialisation, controller)"),
    "policy": ("", "controller.policy: how per-head windows are chosen"),
    "regime": ("", "the suite's name for a policy with its settings"),
    "world_size": ("processes", "data-parallel ranks"),
    "n_params": ("parameters", "trainable parameters of the model"),
    "seq_len": ("tokens", "T: the training sequence length, model.max_seq_len"),
    "corpus": ("", "the training text (a named corpus or a path)"),
    "backend": ("", "model.backend: the windowed-attention backend"),
    "data_fingerprint": ("", "hash of the exact training text and split settings"),
    "aah_version": ("", "version of the aah package that trained the run"),
    "torch_version": ("", "PyTorch version"),
    "python_version": ("", "Python version"),
    "git_commit": ("", "commit of the aah checkout ('-dirty': with local edits), if any"),
    "date": ("", "when the run finished (local time, ISO 8601)"),
    "nonfinite": ("", "keys whose value was NaN or infinite, written as null"),
    "diverged": ("", "the divergence guard stopped the run at this line"),
}


def describe(key: str) -> str:
    """'unit: definition', 'definition' without a unit, or '' for an unknown key."""
    unit, text = TERMS.get(key, ("", ""))
    return f"{unit}: {text}" if unit and text else text


def definitions(keys: list[str]) -> list[str]:
    """Markdown bullets "`key` (unit): definition" for the known keys among `keys`."""
    out = []
    for key in keys:
        if key in TERMS:
            unit, text = TERMS[key]
            out.append(f"- `{key}`{f' ({unit})' if unit else ''}: {text}")
    return out
