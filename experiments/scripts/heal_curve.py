"""How much of the better window's gap a heal closes, against its minutes (the heal's own
held-out blocks).

    python -m experiments.scripts.heal_curve --model M --healed H.json --window W.json \\
        --out DIR/curve.json [--plot DIR/curve.png]

A heal records the held-out KL from full attention every few steps (`healed.json`,
info["heal"]["curve"]): on the 4 blocks of the shipped mix it holds out, KL(full || plan) in
nats per token. Full attention is 0 on that scale, so the share of a one-window plan's gap a
point of the curve closes is 1 - KL(point) / KL(window). This script measures KL(window) on the
very same blocks and rows (the heal's `heal_blocks` and `FullReference`) and writes the curve
as shares of that gap against minutes. It reads no evaluation text: the documents' gap closed
is `default_vs_window`'s, measured on the healed end point only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--healed", required=True, type=Path, help="a plan `aah plan heal` wrote")
    p.add_argument("--window", required=True, type=Path, help="the one-window plan to compare")
    p.add_argument("--out", required=True, type=Path, help="the curve's JSON file")
    p.add_argument("--plot", type=Path, help="a PNG of the share closed against minutes")
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args(argv)


def window_kl(model: Any, healed: Any, window: Any) -> float:
    """KL(full || window) on the held-out blocks of `healed`'s heal."""
    from aah.integrations.hf.run.apply_plan import apply, remove
    from aah.integrations.hf.run.load import resolve_tokenizer
    from aah.integrations.hf.search.heal import HealOptions, heal_blocks, held_out_kl
    from aah.integrations.hf.search.plan_choice import FullReference

    info = healed.info["heal"]
    if info["text"] != "shipped mix":
        raise ValueError(f"{info['text']!r}: only a heal on the shipped mix can be replayed")
    opts = HealOptions(train_blocks=info["train_blocks"], held_out=info["held_out_blocks"])
    _, held = heal_blocks(model, None, info["seq_len"], opts, resolve_tokenizer(model, None))
    ref = FullReference.of(model, held)
    apply(model, window)
    try:
        return held_out_kl(model, ref)
    finally:
        remove(model)


def curve_rows(curve: list[dict[str, float]], window: float) -> list[dict[str, float]]:
    """Each point of a heal's curve with its minutes and the share of `window`'s KL closed."""
    if not window > 0:
        raise ValueError(f"the window's held-out KL must be > 0, got {window}")
    return [{"step": p["step"], "minutes": p["seconds"] / 60, "held_out_kl": p["held_out_kl"],
             "gap_closed": 1 - p["held_out_kl"] / window} for p in curve]  # fmt: skip


def plot(rows: list[dict[str, float]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot([r["minutes"] for r in rows], [100 * r["gap_closed"] for r in rows], marker="o")
    ax.set_xlabel("minutes of healing (2 CPU cores)")
    ax.set_ylabel("% of the window's KL closed")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    import aah.hf as hf

    torch.set_num_threads(args.threads)
    healed, window = hf.WindowPlan.load(args.healed), hf.WindowPlan.load(args.window)
    if "heal" not in healed.info:
        raise ValueError(f"{args.healed} is not a healed plan (no info['heal'])")
    model, _ = hf.load_model(args.model)
    kl = window_kl(model, healed, window)
    rows = curve_rows(healed.info["heal"]["curve"], kl)
    record = {"healed": str(args.healed), "window": str(args.window), "window_kl": kl,
              "blocks": "the heal's held-out blocks of the shipped mix", "rows": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    if args.plot is not None:
        plot(rows, f"{type(model).__name__}, T = {healed.info['heal']['seq_len']}", args.plot)
    best = max(rows, key=lambda r: r["gap_closed"])
    print(
        f"window KL {kl:.4f}; start {rows[0]['gap_closed']:.1%} closed, best "
        f"{best['gap_closed']:.1%} at {best['minutes']:.1f} min (step {best['step']})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
