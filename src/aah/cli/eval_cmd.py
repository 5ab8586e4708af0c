"""`aah eval RUN_DIR`: val loss, bits per byte, ACR, coverage, executed ratio, tokens/s, RSS."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with checkpoints/last.pt")
    p.add_argument("--data", metavar="PATH", help="evaluate on this text file or folder instead")
    p.add_argument("--split", choices=("val", "train"), default="val", help="split (default val)")
    p.add_argument(
        "--batches",
        type=int,
        metavar="N",
        help="eval batches (default: the run's train.eval_batches; 0 = all)",
    )
    p.add_argument("--batch-size", type=int, metavar="B", help="batch size (default: the run's)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    p.add_argument(
        "--cut-windows", metavar="W,W,...",
        help="also score with every head cut to each window (a context-use curve); writes "
        "RUN_DIR/cut_windows.json, which `aah report RUN_DIR` plots",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    if extra:
        raise ValueError(f"unrecognized arguments: {' '.join(extra)}")
    from dataclasses import replace

    from aah.data import load_tokens
    from aah.eval import records
    from aah.eval.context_use import cut_window_curve, parse_cuts
    from aah.eval.evaluate import evaluate_loss, peak_rss_mb, plan_diagnostics
    from aah.eval.load import load_run
    from aah.eval.windowmap import window_map
    from aah.train.distributed import resolve_device

    cuts = parse_cuts(args.cut_windows) if args.cut_windows else None
    device = resolve_device(args.device)
    model, config, payload = load_run(args.run_dir, map_location=device)
    data_cfg = config.data if args.data is None else replace(config.data, path=args.data)
    splits = load_tokens(data_cfg, seq_len=config.seq_len)
    tokens = splits.val if args.split == "val" else splits.train
    batches = config.train.eval_batches if args.batches is None else args.batches
    if batches < 0:
        raise ValueError(f"--batches must be >= 0, got {batches}")
    batch_size = args.batch_size or config.train.batch_size
    seq_len = config.seq_len

    answers = splits.val_answer_distance if args.split == "val" else splits.train_answer_distance

    def score() -> dict:
        return evaluate_loss(
            model, tokens, batch_size=batch_size, seq_len=seq_len,
            max_batches=batches or None, device=device, answers=answers,
            buckets=splits.answer_buckets or (),
        )  # fmt: skip

    ev = score()
    plan = model.window_plan()
    diag = plan_diagnostics(plan, seq_len)
    result = {
        "run_dir": str(Path(args.run_dir)),
        "step": payload["step"],
        "corpus": splits.name,
        "split": args.split,
        "val_loss": ev["val_loss"],
        "val_bpb": ev["val_bpb"],
        **{k: ev[k] for k in ("val_acc", "val_acc_by_distance", "val_answers") if k in ev},
        **diag,
        "tokens": ev["eval_tokens"],
        "tokens_per_s": ev["eval_tokens_per_s"],
        "peak_rss_mb": peak_rss_mb(),
        "seq_len": seq_len,
        "windows": plan,
    }
    print(f"run {result['run_dir']} at step {result['step']} on {splits.name} ({args.split})")
    print(
        f"loss {ev['val_loss']:.4f} nats | bits/byte {ev['val_bpb']:.4f} | ACR {diag['acr']:.3f}"
        f" | causal coverage {diag['causal_coverage']:.3f}"
        f" | executed ratio {diag.get('executed_ratio', float('nan')):.3f}"
        f" | {ev['eval_tokens_per_s']:,.0f} tok/s | peak RSS {result['peak_rss_mb']:,.0f} MB"
    )
    if "val_acc" in ev:
        by = ", ".join(f"{k}: {_pct(v)}" for k, v in ev["val_acc_by_distance"].items())
        n = ev["val_answers"]
        print(f"recall accuracy {_pct(ev['val_acc'])} ({n} answers) | by distance {by}")
    print(window_map(plan, seq_len))
    if cuts:
        curve = cut_window_curve(model, score, cuts)
        keep = ("cut", "window", "val_loss", "val_bpb", "val_acc", "val_acc_by_distance")
        result["cut_windows"] = [{k: r[k] for k in keep if k in r} for r in curve]
        print("every head cut to w (test time):")
        for row in result["cut_windows"]:
            acc = ""
            if "val_acc" in row:
                by = " ".join(_pct(v) for v in row["val_acc_by_distance"].values())
                acc = f" | recall {_pct(row['val_acc'])} | by distance {by}"
            print(f"  {row['cut']:>13} | bits/byte {row['val_bpb']:.4f}{acc}")
        records.write_json(Path(args.run_dir) / "cut_windows.json", result["cut_windows"])
    if args.json:
        print(json.dumps(result))
    return 0


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
