"""Peer comparison at equal KV bytes on a trained Llama-style recall model.

Protocol (the same held-out windows for every method): each window of the held-out
`synthetic:recall` stream (T=256, seed TASK_SEED + 2) is split into a prompt of P=192 bytes,
prefilled into the cache, and a continuation of 64 bytes, fed one byte at a time through that
cache (teacher forcing). Scored: the 65 targets from the last prompt byte on, i.e. recall
accuracy at their answer bytes (overall and in the 128-255 bucket, whose sources lie in the
prompt's first half) and bits per byte. The cache's budget is a fraction f of the full cache
of the prompt, `f x L x H_kv x P x D x 2 x 4` bytes per sequence.

Methods here (project environment):
- `full`: DynamicCache with sdpa, no compression.
- `searched`: `hf.search.plan_search.search_plan(kv_budget=f x full, sinks=4, signal="mass")` on
calibration
  windows of another seed (T=P), served by `PerHeadCache` (`hf.apply` + `hf.per_head_cache`).
- `loss-searched`: the same search on the loss signal (`search_plan(signal="loss")`: the
  calibration loss rise of cutting each KV head alone to each candidate, measured once per
  model and allocated at every f), same cache.
- `uniform`: every head window `floor(f P) - 4` + 4 sinks (StreamingLLM's rule), same cache.

`experiments/scripts/hf_peer_kvpress.py` runs kvpress's presses on the same windows in a separate
environment; `report` merges every JSON into results/hf-peer/peer.{json,md,png}.

    python -m experiments.scripts.hf_peer data --out /tmp/hfpeer/eval.npz
    python -m experiments.scripts.hf_peer eval --model DIR --data /tmp/hfpeer/eval.npz --out R.json
    python -m experiments.scripts.hf_peer eval ... --methods loss-searched --out R2.json
    python -m experiments.scripts.hf_peer report R1.json R2.json ... --out results/hf-peer
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

SEQ_LEN = 256
PROMPT = 192
SINKS = 4
FRACTIONS = (0.1, 0.2, 0.3, 0.5)
CANDIDATES = [4, 8, 12, 16, 24, 32, 48, 64, 96, 128, SEQ_LEN]
FAR = "128-255"
METHODS = ("full", "searched", "loss-searched", "uniform")


# ---------------------------------------------------------------- data and scoring


def make_data(n_windows: int, seed_offset: int) -> dict[str, np.ndarray]:
    """x (n, T + 1) int64 windows of the recall stream and marks (n, T) of their targets."""
    from aah.data.loader import answer_marks
    from aah.data.recall import generate_recall
    from aah.data.synthetic import TASK_SEED

    stream = generate_recall(
        (n_windows + 1) * SEQ_LEN + 1, SEQ_LEN, TASK_SEED + seed_offset,
        words=1, n_keys=16, n_values=8, fused=True,
    )  # fmt: skip
    tok = stream.tokens.astype(np.int64)
    starts = np.arange(n_windows) * SEQ_LEN
    x = np.stack([tok[s : s + SEQ_LEN + 1] for s in starts])
    marks = answer_marks(stream.answer_distance, starts, SEQ_LEN).numpy()
    return {"x": x, "marks": marks}


class Score:
    """Recall hits per distance bucket and summed cross-entropy over the scored targets."""

    def __init__(self) -> None:
        from aah.data.synthetic import distance_buckets
        from aah.eval.recall_accuracy import RecallCounter

        self.counter = RecallCounter(distance_buckets(SEQ_LEN))
        self.nats = 0.0
        self.n = 0
        self.prompt_hits = 0
        self.prompt_answers = 0

    def add(self, logits: torch.Tensor, targets: torch.Tensor, marks: torch.Tensor) -> None:
        """Scored positions only (`scored`): target j is window byte PROMPT + j, its source
        (for an answer) PROMPT + j - mark, inside the prompt when that is < PROMPT."""
        logits = logits.float()
        self.nats += torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), reduction="sum"
        ).item()
        self.n += targets.numel()
        self.counter.add(logits, targets, marks)
        in_prompt = (marks > 0) & (marks > torch.arange(marks.shape[1]))
        self.prompt_answers += int(in_prompt.sum())
        self.prompt_hits += int(((logits.argmax(-1) == targets) & in_prompt).sum())

    def result(self) -> dict[str, Any]:
        res = self.counter.result()
        return {
            "acc": res["val_acc"],
            "far_acc": res["val_acc_by_distance"][FAR],
            "acc_by_distance": res["val_acc_by_distance"],
            "answers": res["val_answers"],
            "far_answers": self.counter.counts[-1],
            # answers whose source the prompt holds: what the compressed prompt cache kept
            "prompt_acc": self.prompt_hits / self.prompt_answers if self.prompt_answers else None,
            "prompt_answers": self.prompt_answers,
            "bits_per_byte": self.nats / self.n / math.log(2),
        }


def scored(x: torch.Tensor, marks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets and marks of the scored positions: x[P..T] predicted from x[P-1..T-1]."""
    return x[:, PROMPT : SEQ_LEN + 1], marks[:, PROMPT - 1 : SEQ_LEN]


# ---------------------------------------------------------------- project methods


def cache_kw(model: torch.nn.Module) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def dynamic_nbytes(cache: Any) -> int:
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


@torch.inference_mode()
def run_cache(
    model: torch.nn.Module, data: dict[str, np.ndarray], make_cache: Any, nbytes: Any, batch: int
) -> dict[str, Any]:
    """Prefill P bytes, then feed the continuation byte by byte through the same cache."""
    key = cache_kw(model)
    score = Score()
    held_prefill, held_end = [], []
    x_all = torch.from_numpy(data["x"])
    m_all = torch.from_numpy(data["marks"])
    for i in range(0, x_all.shape[0], batch):
        x, marks = x_all[i : i + batch], m_all[i : i + batch]
        cache = make_cache()
        logits = [model(input_ids=x[:, :PROMPT], use_cache=True, **{key: cache}).logits[:, -1:]]
        held_prefill.append(nbytes(cache) / x.shape[0])
        for t in range(PROMPT, SEQ_LEN):
            step = model(input_ids=x[:, t : t + 1], use_cache=True, **{key: cache}).logits
            logits.append(step[:, -1:])
        held_end.append(nbytes(cache) / x.shape[0])
        targets, m = scored(x, marks)
        score.add(torch.cat(logits, dim=1), targets, m)
    out = score.result()
    out["kv_bytes"] = statistics.mean(held_prefill)  # per sequence, after the prompt
    out["kv_bytes_end"] = statistics.mean(held_end)  # per sequence, after the continuation
    return out


def uniform_plan(model: torch.nn.Module, fraction: float) -> list[list[int]]:
    cfg = model.config
    w = max(1, math.floor(fraction * PROMPT) - SINKS)
    return [[w] * cfg.num_attention_heads for _ in range(cfg.num_hidden_layers)]


def eval_model(args: argparse.Namespace) -> None:
    from transformers import DynamicCache, LlamaForCausalLM

    from aah.attention.kv_bytes import full_kv_bytes
    from aah.controller.allocate import Budget
    from aah.integrations import hf
    from aah.integrations.hf.run.model_layout import kv_shape
    from aah.integrations.hf.search.calibration_text import calibration_batches
    from aah.integrations.hf.search.cut_loss import measure_loss_costs
    from aah.integrations.hf.search.plan_allocation import plan_from_costs
    from aah.integrations.hf.search.plan_search import search_plan

    torch.set_num_threads(args.threads)
    model = LlamaForCausalLM.from_pretrained(args.model).eval()
    model.config._attn_implementation = "sdpa"
    d = np.load(args.data)
    data = {"x": d["x"], "marks": d["marks"]}
    calib = torch.from_numpy(make_data(args.calib_windows, 3)["x"][:, :PROMPT])
    shape = kv_shape(model)
    full = full_kv_bytes(shape, PROMPT)
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    start = time.perf_counter()

    def per_head(plan: list[list[int]]):  # type: ignore[no-untyped-def]
        hf.apply(model, plan, sinks=SINKS)
        return run_cache(
            model, data, lambda: hf.per_head_cache(model, SEQ_LEN), lambda c: c.nbytes(), args.batch
        )

    def show(row: dict[str, Any]) -> None:
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("method", "fraction", "acc", "far_acc")}))

    if hf.current_plan(model) is not None:
        hf.remove(model)
    if "full" in args.methods:
        res = run_cache(model, data, DynamicCache, dynamic_nbytes, args.batch)
        show({"method": "full", "fraction": 1.0, **res})
    costs = None
    if "loss-searched" in args.methods:
        # The loss costs do not depend on the budget: measured once, allocated at every f.
        t0 = time.perf_counter()
        batches = calibration_batches(model, calib, seq_len=PROMPT, batch_size=16)
        costs = measure_loss_costs(model, batches, CANDIDATES, sinks=SINKS, progress=True)
        extra["loss_costs"] = costs.tolist()  # [layer][KV head][candidate], nats
        extra["loss_signal_seconds"] = time.perf_counter() - t0
    for f in args.fractions:
        if "searched" in args.methods:
            plan = search_plan(
                model, calib, kv_budget=int(f * full), sinks=SINKS, seq_len=PROMPT,
                candidates=CANDIDATES, batch_size=16, signal="mass",  # as the results were made
                choose=False,
            )  # fmt: skip
            res = per_head(plan.windows)
            show(
                {"method": "searched", "fraction": f, **res, "windows": plan.windows,
                 "expected_kv_bytes": plan.info["kv_bytes"], "lost_mass": plan.info["lost_mass"]}
            )  # fmt: skip
        if costs is not None:
            cfg = model.config
            budget = Budget(PROMPT, cfg.num_hidden_layers, cfg.num_attention_heads,
                            kv_bytes=int(f * full), sinks=SINKS, shape=shape)  # fmt: skip
            plan = plan_from_costs(
                costs, CANDIDATES, budget, type(model).__name__, signal="loss", unit="loss"
            )
            res = per_head(plan.windows)
            show(
                {"method": "loss-searched", "fraction": f, **res, "windows": plan.windows,
                 "expected_kv_bytes": plan.info["kv_bytes"],
                 "loss_increase": plan.info["loss_increase"]}
            )  # fmt: skip
        if "uniform" in args.methods:
            plan_u = uniform_plan(model, f)
            show({"method": "uniform", "fraction": f, **per_head(plan_u), "windows": plan_u})
        hf.remove(model)
    info = json.loads((Path(args.model) / "train.json").read_text())
    out = {
        "engine": "project",
        "model": str(args.model),
        "seed": info["seed"],
        "train_final": info["final"],
        "full_kv_bytes": full,
        "prompt": PROMPT,
        "seq_len": SEQ_LEN,
        "sinks": SINKS,
        "windows_evaluated": int(data["x"].shape[0]),
        "seconds": time.perf_counter() - start,
        "env": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "rows": rows,
        **extra,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


# ---------------------------------------------------------------- report

LABELS = {
    "full": "full cache",
    "searched": "searched per-KV-head plan + 4 sinks (ours)",
    "loss-searched": "loss-searched per-KV-head plan + 4 sinks (ours)",
    "uniform": "uniform window + 4 sinks (ours, StreamingLLM rule)",
    "kvpress-streaming": "kvpress StreamingLLMPress (n_sink 4)",
    "kvpress-snapkv": "kvpress SnapKVPress (window 64)",
}


def report(args: argparse.Namespace) -> None:
    runs = [json.loads(Path(p).read_text()) for p in args.inputs]
    cells: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for run in runs:
        for row in run["rows"]:
            cells.setdefault((row["method"], row["fraction"]), []).append(
                {**row, "seed": run["seed"], "engine": run["engine"]}
            )
    seeds = sorted({run["seed"] for run in runs})
    full_bytes = runs[0]["full_kv_bytes"]
    table = []
    for (method, frac), rs in sorted(
        cells.items(), key=lambda kv: (list(LABELS).index(kv[0][0]), kv[0][1])
    ):
        if method == "full" and any(r["engine"] != "project" for r in rs):
            rs = [r for r in rs if r["engine"] == "project"]  # kvpress's full run: a check
        entry: dict[str, Any] = {"method": method, "fraction": frac, "n_seeds": len(rs)}
        for k in ("far_acc", "prompt_acc", "acc", "bits_per_byte", "kv_bytes", "kv_bytes_end"):
            vals = [float(r[k]) for r in rs]
            entry[k] = statistics.mean(vals)
            entry[k + "_sd"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
            entry[k + "_min"], entry[k + "_max"] = min(vals), max(vals)
        entry["kv_ratio"] = entry["kv_bytes"] / full_bytes
        table.append(entry)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"runs": runs, "table": table, "seeds": seeds, "full_kv_bytes": full_bytes}
    (out / "peer.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "peer.md").write_text(markdown(table, runs, seeds))
    plot(table, out / "peer.png", full_bytes)


def _pm(entry: dict[str, Any], key: str, fmt: str) -> str:
    s = format(entry[key], fmt)
    return s + (f" ± {format(entry[key + '_sd'], fmt)}" if entry["n_seeds"] > 1 else "")


def markdown(table: list[dict[str, Any]], runs: list[dict[str, Any]], seeds: list[int]) -> str:
    r0 = runs[0]
    lines = [
        "# Peer comparison at equal KV bytes: recall model (Llama-style, transformers)",
        "",
        "Model: Llama-style, 2 layers, d_model 128, 8 query / "
        "4 KV heads (head dim 16), byte vocabulary, fp32, trained at T=256 on "
        "`synthetic:recall` (configs/recall.toml's task) by "
        "`experiments/scripts/hf_peer_train.py`; "
        f"seeds {seeds} (mean ± sd over seeds where more than one).",
        "",
        f"Protocol: {r0['windows_evaluated']} held-out windows of T={r0['seq_len']} bytes; the "
        f"first P={r0['prompt']} bytes are prefilled into the cache (and compressed), the last "
        f"{r0['seq_len'] - r0['prompt']} are fed through it one byte at a time; scored: the "
        f"{r0['seq_len'] - r0['prompt'] + 1} targets from the last prompt byte on. Far = answers "
        "whose source lies 128-255 bytes back (always in the prompt); prompt-source = answers "
        "whose source lies in the prompt (what the compressed prompt cache must have kept); "
        "acc = all answers, including those whose source is in the continuation (there "
        "kvpress's caches, which keep every continuation position, see more than a window "
        "does). Chance accuracy 0.125; bits/byte over all scored targets.",
        "",
        f"KV fraction f: budget = f x the full cache of the prompt ({r0['full_kv_bytes']} bytes "
        "per sequence). KV bytes = bytes held per sequence after the prompt, read off the cache "
        "(PerHeadCache.nbytes(); kvpress: the DynamicCache's tensors after compression). "
        "`end` = after the continuation: windowed heads stay at their size, full heads and "
        "kvpress's caches grow by the 64 continuation positions.",
        "",
        "Plans: both searches allocate one window per KV head under the KV-byte budget from 64 "
        "calibration windows of another seed of the stream (candidates "
        f"{', '.join(str(c) for c in CANDIDATES)}); `searched` on the attention mass beyond "
        "each window (`aah plan search`'s default `--signal mass`), `loss-searched` on the "
        "calibration loss rise of cutting each KV head alone to each window (`--signal loss`; "
        "measured once per model, the costs are in peer.json as `loss_costs`, [layer][KV head]"
        "[candidate] nats).",
        "",
        "| method | f | far acc | prompt-source acc | acc | bits/byte | KV bytes (ratio) "
        "| KV bytes end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in table:
        lines.append(
            f"| {LABELS[e['method']]} | {e['fraction']:g} | {_pm(e, 'far_acc', '.3f')} | "
            f"{_pm(e, 'prompt_acc', '.3f')} | {_pm(e, 'acc', '.3f')} | "
            f"{_pm(e, 'bits_per_byte', '.3f')} | "
            f"{e['kv_bytes']:.0f} ({e['kv_ratio']:.3f}) | {e['kv_bytes_end']:.0f} |"
        )
    lines.append("")
    envs = sorted({f"{r['engine']}: " + ", ".join(f"{k} {v}" for k, v in r["env"].items())
                   for r in runs})  # fmt: skip
    lines += [
        "Environments: " + "; ".join(envs) + ". 1 thread, shared 2-core CPU. Commands: "
        "docs/hf.md, section 'Peer comparison at equal KV bytes'.",
        "",
    ]
    for method, title in (("searched", "Searched plans"), ("loss-searched", "Loss-searched plans")):
        plans = [
            (run["seed"], row["fraction"], row["windows"])
            for run in runs
            for row in run["rows"]
            if row["method"] == method
        ]
        if plans:
            lines += [f"{title} (windows per query head, [layer][head]; 4 sinks each):", ""]
            lines += [f"- seed {s}, f={f:g}: {w}" for s, f, w in plans]
            lines.append("")
    return "\n".join(lines)


def plot(table: list[dict[str, Any]], path: Path, full_bytes: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in (
        (axes[0], "far_acc", "far-bucket recall accuracy (128-255 back)"),
        (axes[1], "prompt_acc", "recall accuracy, answers whose source is in the prompt"),
    ):
        for method in LABELS:
            es = [e for e in table if e["method"] == method]
            if not es:
                continue
            xs = [e["kv_bytes"] / 1024 for e in es]
            ys = [e[key] for e in es]
            err = [e[key + "_sd"] for e in es]
            if method == "full":
                ax.axhline(ys[0], color="k", ls="--", lw=1, label=LABELS[method])
                continue
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=LABELS[method])
        ax.axhline(0.125, color="grey", ls=":", lw=1, label="chance")
        ax.set_xlabel("KV KiB per sequence after the prompt (full: %.0f)" % (full_bytes / 1024))
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pd = sub.add_parser("data", help="write the held-out windows (npz) for every engine")
    pd.add_argument("--out", required=True)
    pd.add_argument("--windows", type=int, default=512)
    pe = sub.add_parser(
        "eval", help="full, searched, loss-searched and uniform through the project's cache"
    )
    pe.add_argument("--model", required=True)
    pe.add_argument("--data", required=True)
    pe.add_argument("--out", required=True)
    pe.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    pe.add_argument("--calib-windows", type=int, default=64)
    pe.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    pe.add_argument("--batch", type=int, default=128)
    pe.add_argument("--threads", type=int, default=1)
    pr = sub.add_parser("report", help="merge result JSONs into peer.json, peer.md, peer.png")
    pr.add_argument("inputs", nargs="+")
    pr.add_argument("--out", default="results/hf-peer")
    args = p.parse_args(argv)
    if args.cmd == "data":
        d = make_data(args.windows, 2)
        np.savez_compressed(args.out, **d)
        n = (d["marks"][:, PROMPT - 1 :] > 0).sum()
        far = (d["marks"][:, PROMPT - 1 :] >= 128).sum()
        print(f"{args.windows} windows, {n} scored answers, {far} far", file=sys.stderr)
    elif args.cmd == "eval":
        eval_model(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
