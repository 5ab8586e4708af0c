"""`aah eval RUN_DIR`: loss, bits per byte, ACR, coverage, executed ratio, tokens/s, RSS.

Two sources: the run's corpus (a split of it, scored as during training: the first
`--batches` batches of non-overlapping windows), or `--data FILE|DIR`, scored whole (every
target once, strided windows when longer than the context; aah.eval.strided).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from aah.cli import flags


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with checkpoints/last.pt")
    p.add_argument(
        "--data", metavar="PATH",
        help="score this text file or folder, whole, instead of the run's corpus",
    )  # fmt: skip
    p.add_argument(
        "--split", choices=("val", "train"), default=None,
        help="which split of the run's corpus (default val); not with --data",
    )  # fmt: skip
    p.add_argument(
        "--stride", type=int, metavar="S",
        help="--data texts longer than the context: window start step, in tokens (default "
        "half the context; every target after the first window sees >= T - S tokens)",
    )  # fmt: skip
    p.add_argument(
        "--batches", type=int, metavar="N",
        help="eval batches (default: the run's train.eval_batches for its corpus, all for "
        "--data; 0 = all)",
    )  # fmt: skip
    p.add_argument(
        "--layout", metavar="{first,spread}", default=None,
        help="where the corpus batches sit in the split: back to back from its start, or "
        "evenly spaced over all of it (default: the run's train.eval_layout)",
    )  # fmt: skip
    flags.add_batch_size(p, "windows per forward pass (default: the run's train.batch_size)")
    flags.add_device(p)
    flags.add_threads(p)
    p.add_argument(
        "--cut-windows", metavar="W,W,...",
        help="also score with every head cut to each window (a context-use curve); on the "
        "run's validation split it is written to RUN_DIR/cut_windows.json, which `aah report "
        "RUN_DIR` plots",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")


def check_arguments(args: argparse.Namespace) -> None:
    """ValueError naming the first bad flag, before anything is loaded."""
    if args.data is not None and args.split is not None:
        raise ValueError(
            f"--split {args.split} applies to the run's corpus; --data is scored whole"
        )
    if args.layout not in (None, "first", "spread"):
        raise ValueError(f"--layout must be first or spread, got {args.layout!r}")
    if args.layout is not None and args.data is not None:
        raise ValueError(
            f"--layout {args.layout} applies to the run's corpus; --data is scored whole"
        )
    if args.stride is not None and args.data is None:
        raise ValueError("--stride applies to --data only (corpus splits use whole windows)")
    flags.check_batch_size(args.batch_size)
    flags.check_threads(args.threads)
    if args.batches is not None and args.batches < 0:
        raise ValueError(f"--batches must be >= 0, got {args.batches}")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    if extra:
        raise ValueError(f"unrecognized arguments: {' '.join(extra)}")
    check_arguments(args)
    from aah import records
    from aah.eval.context_use import cut_window_curve, parse_cuts
    from aah.eval.evaluate import peak_rss_mb, plan_diagnostics
    from aah.eval.windowmap import window_map
    from aah.training.distributed import resolve_device
    from aah.training.load import load_run

    cuts = parse_cuts(args.cut_windows) if args.cut_windows else None
    device = resolve_device(args.device, what="--device")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model, config, payload = load_run(args.run_dir, map_location=device)
    batch_size = args.batch_size or config.train.batch_size
    source = (_given_source if args.data is not None else _corpus_source)(
        args, model, config, payload, batch_size, device
    )
    ev = source["score"]()
    plan = model.window_plan()
    seq_len = config.seq_len
    diag = plan_diagnostics(plan, seq_len)
    result = {
        "run_dir": str(Path(args.run_dir)),
        "step": payload["step"],
        **source["labels"],
        **ev,
        **diag,
        "peak_rss_mb": peak_rss_mb(),
        "seq_len": seq_len,
        "windows": plan,
    }
    print(f"run {result['run_dir']} at step {result['step']} on {source['title']}")
    if source.get("note"):
        print(source["note"])
    print(
        f"loss {ev['loss']:.4f} nats/byte | bits/byte {ev['bpb']:.4f} over {ev['tokens']:,} "
        f"tokens | ACR {diag['acr']:.3f} | causal coverage {diag['causal_coverage']:.3f}"
        f" | executed ratio {diag.get('executed_ratio', float('nan')):.3f}"
        f" | {ev['tokens_per_s']:,.0f} tok/s | peak RSS {result['peak_rss_mb']:,.0f} MB"
    )
    if "val_acc" in ev:
        by = ", ".join(f"{k}: {_pct(v)}" for k, v in ev["val_acc_by_distance"].items())
        n = ev["val_answers"]
        print(f"recall accuracy {_pct(ev['val_acc'])} ({n} answers) | by distance {by}")
    print(window_map(plan, seq_len))
    if cuts:
        curve = cut_window_curve(model, source["score"], cuts)
        keep = ("cut", "window", "loss", "bpb", "val_loss", "val_bpb", "val_acc",
                "val_acc_by_distance")  # fmt: skip
        result["cut_windows"] = [{k: r[k] for k in keep if k in r} for r in curve]
        print("every head cut to w (test time):")
        for row in result["cut_windows"]:
            acc = ""
            if "val_acc" in row:
                by = " ".join(_pct(v) for v in row["val_acc_by_distance"].values())
                acc = f" | recall {_pct(row['val_acc'])} | by distance {by}"
            print(f"  {row['cut']:>13} | bits/byte {row['bpb']:.4f}{acc}")
        if result.get("split") == "val":  # the run's own context-use curve, for its report
            records.write_json(Path(args.run_dir) / "cut_windows.json", result["cut_windows"])
    if args.json:
        print(records.dumps(result))
    return 0


def _corpus_source(args, model, config, payload, batch_size, device) -> dict[str, Any]:
    """A split of the run's corpus, scored like the training loop's evaluations."""
    from aah.data import load_tokens
    from aah.eval.evaluate import evaluate_loss
    from aah.training import fingerprint

    split = args.split or "val"
    splits = load_tokens(config.data, seq_len=config.seq_len)
    tokens = splits.val if split == "val" else splits.train
    answers = splits.val_answer_distance if split == "val" else splits.train_answer_distance
    batches = config.train.eval_batches if args.batches is None else args.batches
    layout = config.train.eval_layout if args.layout is None else args.layout
    changed = fingerprint.changed(payload.get(fingerprint.KEY), splits.content_hash, config.data)
    if changed is not None:
        print(f"warning: {changed}; these scores are on the data as it is now", file=sys.stderr)

    def score() -> dict[str, Any]:
        ev = evaluate_loss(
            model, tokens, batch_size=batch_size, seq_len=config.seq_len,
            max_batches=batches or None, device=device, answers=answers,
            buckets=splits.answer_buckets or (), layout=layout,
        )  # fmt: skip
        out = {"loss": ev["val_loss"], "bpb": ev["val_bpb"], "tokens": ev["eval_tokens"],
               "tokens_per_s": ev["eval_tokens_per_s"]}  # fmt: skip
        if split == "val":  # the names the training loop logs, kept for the validation split
            out.update({k: v for k, v in ev.items() if k.startswith("val_")})
        return out

    return {
        "score": score,
        "title": f"{splits.name} ({split} split)",
        "labels": {
            "corpus": splits.name,
            "split": split,
            "layout": layout,
            "data_changed": changed is not None,
        },
    }


def _given_source(args, model, config, payload, batch_size, device) -> dict[str, Any]:
    """A text given with --data, scored whole with strided windows."""
    from aah.data.given import read_given
    from aah.eval.strided import default_stride, score_text, strided_windows

    text = read_given(args.data)
    seq_len = config.seq_len
    stride = default_stride(seq_len) if args.stride is None else args.stride
    windows = strided_windows(int(text.tokens.size), seq_len, stride)  # checks length, stride
    limit = args.batches * batch_size if args.batches else None
    tokens = text.tokens
    if limit is not None and limit < len(windows):  # score a prefix: the first `limit` windows
        start, length, _ = windows[limit - 1]
        tokens = tokens[: start + length + 1]

    def score() -> dict[str, Any]:
        return score_text(
            model, tokens, seq_len=seq_len, stride=stride, batch_size=batch_size, device=device
        )

    files = f"{text.n_files} file{'s' if text.n_files != 1 else ''}"
    if len(windows) == 1:
        how = f"one window of {text.tokens.size - 1} targets (context {seq_len})"
    else:
        how = (
            f"{len(windows)} windows of {seq_len} tokens, stride {stride}: every target after "
            f"the first window sees >= {seq_len - stride} tokens of context"
        )
    note = f"scored whole: {text.tokens.size:,} tokens in {files}, {how}"
    if tokens.size < text.tokens.size:
        note += f"; --batches {args.batches} limits it to the first {tokens.size:,} tokens"
    return {
        "score": score,
        "title": f"{text.name} (--data, whole text)",
        "note": note,
        "labels": {"data": text.name, "data_files": text.n_files, "split": None},
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
