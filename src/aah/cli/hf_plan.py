"""Command logic for `aah plan search` and `aah plan apply` on Hugging Face models.

    aah plan search MODEL_DIR_OR_NAME --budget 0.3 --text calib.txt --out plan.json \
        [--sinks 4] [--heatmap plan.png] [--heldout heldout.txt]
    aah plan search MODEL_DIR_OR_NAME --budget-kv-mb 64 --sinks 4 --text calib.txt --out plan.json
    aah plan search MODEL_DIR_OR_NAME --signal loss --budget 0.3 --text calib.txt --out plan.json
    aah plan apply MODEL_DIR --plan plan.json --text heldout.txt

The search gives one window per KV head (its query heads share it: a KV head's memory follows
its widest query head) under a causal-coverage cap (`--budget`, default 0.3) or a cap on the
KV bytes the per-head cache holds per sequence at the calibration length (`--budget-kv-mb`,
MB = 2**20 bytes); `--sinks N` gives every head N attention sinks, measured and costed.
`--signal` picks what is allocated on: attention mass beyond each window (`mass`, one pass over
the calibration text), the change of each head's residual-stream contribution (`output`, one
pass; values and output projection included), that plus the same at the answer rows of
retrieval prompts built on the calibration text (`output+retrieval`), or the loss rise of
cutting each KV head alone to each window (`loss`, `hf.ablation`: one pass per KV head and
candidate).

Models load through `hf.load.load_model`: a GGUF file or a folder holding one, or a
transformers folder, work offline; a hub name needs network access (and is cached by
huggingface_hub as usual). The tokenizer is loaded from the same place when it has one;
otherwise text is read as UTF-8 bytes, which only suits models with vocab_size >= 256
(random test models). Both commands print a human summary and,
as their last stdout line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, get_args

from aah.choices import SearchSignal

# Only the standard library at import time: the CLI builds its parser without loading torch.
HUB_NOTE = "a GGUF file, a folder (transformers or one .gguf), or a hub name (needs network)"
SIGNALS = get_args(SearchSignal)  # from the torch-free leaf: the parser loads no torch


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _common(p: argparse.ArgumentParser, model_help: str) -> None:
    p.add_argument("model", metavar="MODEL", help=model_help)
    p.add_argument("--text", required=True, metavar="FILE", help="UTF-8 text file")
    p.add_argument("--batch-size", type=int, default=1, help="blocks per forward pass")
    p.add_argument("--max-batches", type=int, default=8, help="batches of text to use at most")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, ...")


def add_plan_search_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `aah plan search`."""
    _common(parser, f"model to search a plan for: {HUB_NOTE}")
    parser.add_argument(
        "--budget", type=float, help="causal coverage cap in (0, 1], sinks included (default 0.3)"
    )
    parser.add_argument(
        "--budget-kv-mb",
        type=float,
        metavar="MB",
        help="instead, a cap on KV cache MB (2**20 bytes) per sequence at the calibration length",
    )
    parser.add_argument(
        "--sinks", type=int, default=0, metavar="N", help="attention sinks per head (default 0)"
    )
    parser.add_argument(
        "--signal",
        choices=SIGNALS,
        default="mass",
        help="what to allocate on: 'mass' (default), attention mass beyond each window, one "
        "forward over the calibration batches; 'output', the squared change of each head's "
        "contribution to the residual stream (values and output projection included), one "
        "forward (it beat mass on SmolLM2-135M, docs/pretrained.md); 'output+retrieval', that "
        "plus the same change at the answer rows of 16 retrieval prompts built on the "
        "calibration text, equally weighted (keeps the heads that fetch far facts; 17 more "
        "forwards); 'loss', the rise of the "
        "mean next-token loss when one KV head alone is cut to each window, one forward over "
        "the calibration batches per "
        "(KV head, candidate < T), i.e. layers x KV heads x candidates passes: slower, but it "
        "keeps heads that retrieve rare far tokens, which carry little mean mass; "
        "'suffix-loss', the same rise over the last --suffix tokens of each block with the "
        "context before them frozen at full attention (each cut reruns only those tokens: "
        "about 1/8 of 'loss''s time at the default suffix)",
    )
    parser.add_argument(
        "--suffix", type=int, metavar="N",
        help="tokens per block the suffix-loss signal scores (default T/16)",
    )  # fmt: skip
    parser.add_argument("--out", required=True, metavar="FILE", help="plan JSON to write")
    parser.add_argument("--heatmap", metavar="PNG", help="also write a layer x head heatmap")
    parser.add_argument("--seq-len", type=int, help="calibration length T (default 512)")
    parser.add_argument(
        "--candidates", type=_ints, help="comma-separated windows (default T/32..T)"
    )
    parser.add_argument("--sample-queries", type=int, default=64, help="exact rows per head, batch")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampled query rows")
    parser.add_argument("--heldout", metavar="FILE", help="also sweep budgets: held-out perplexity")
    parser.add_argument(
        "--sweep-budgets",
        type=_floats,
        default=[0.2, 0.4, 0.6, 0.8],
        help="coverage budgets for --heldout",
    )


def add_plan_apply_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `aah plan apply`."""
    _common(parser, f"model to evaluate: {HUB_NOTE}")
    parser.add_argument("--plan", required=True, metavar="FILE", help="plan JSON (plan search)")
    parser.add_argument("--seq-len", type=int, help="block length (default: the plan's seq_len)")
    parser.add_argument(
        "--backend", default="auto", help="windowed attention backend (auto, grouped, flex, ...)"
    )


def _read(path: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"text file {path!r} does not exist")
    return file.read_text(encoding="utf-8")


DEFAULT_BUDGET = 0.3
MB = 2**20


def budgets(args: argparse.Namespace) -> tuple[float | None, int | None]:
    """(coverage budget, KV byte budget) from --budget / --budget-kv-mb, one of them None."""
    if args.budget_kv_mb is not None:
        return None, int(args.budget_kv_mb * MB)
    return (DEFAULT_BUDGET if args.budget is None else args.budget), None


def run_plan_search(args: argparse.Namespace) -> int:
    """Search a plan, write it (and a heatmap); with --heldout also print a budget sweep."""
    from aah.integrations.hf.load import load_model
    from aah.integrations.hf.search import search_plan
    from aah.integrations.hf.sweep import budget_sweep, sweep_json, sweep_table
    from aah.report.plan_heatmap import save_heatmap

    text = _read(args.text)
    model, tokenizer = load_model(args.model, args.device)
    options = {
        "seq_len": args.seq_len,
        "candidates": args.candidates,
        "batch_size": args.batch_size,
        "max_batches": args.max_batches,
        "sample_queries": args.sample_queries,
        "seed": args.seed,
        "tokenizer": tokenizer,
        "sinks": args.sinks,
    }
    budget, kv_budget = budgets(args)
    plan = search_plan(
        model, text, budget, kv_budget=kv_budget, signal=args.signal, suffix=args.suffix,
        progress=True, **options,
    )  # fmt: skip
    plan.save(args.out)
    cap = f"{plan.budget / MB:.3f} KV MB" if kv_budget is not None else f"coverage {plan.budget}"
    expected = (
        f"summed single-KV-head loss rise {plan.loss_increase:.4f} nats"
        if plan.signal in ("loss", "suffix-loss")
        else f"expected lost mass {plan.lost_mass:.4f}"
        if plan.signal == "mass"
        else "allocated on each head's residual-stream change"
    )
    print(
        f"plan for {plan.model} (one window per KV head, {args.sinks} sinks, {plan.signal} "
        f"signal): budget {cap}, causal coverage {plan.coverage:.4f} and KV "
        f"{(plan.kv_bytes or 0) / MB:.3f} MB per sequence at T={plan.seq_len}, {expected} "
        f"-> {args.out}"
    )
    for layer, row in enumerate(plan.windows):
        print(f"  layer {layer:3d}: {' '.join(str(w) for w in row)}")
    if args.heatmap:
        save_heatmap(plan, args.heatmap, title=f"{plan.model}, budget {plan.budget}")
        print(f"heatmap -> {args.heatmap}")
    summary: dict[str, Any] = {
        "out": args.out,
        "budget": plan.budget,
        "budget_unit": plan.budget_unit,
        "coverage": plan.coverage,
        "kv_bytes": plan.kv_bytes,
        "sinks": args.sinks,
        "signal": plan.signal,
    }
    if args.heldout:
        rows = budget_sweep(model, text, _read(args.heldout), args.sweep_budgets, **options)
        print(sweep_table(rows))
        summary["sweep"] = json.loads(sweep_json(rows))["rows"]
    print(json.dumps(summary))
    return 0


def run_plan_apply(args: argparse.Namespace) -> int:
    """Print held-out perplexity of the model without and with the plan (and its sinks), with
    the plan's causal coverage and per-head cache KV bytes at the block length."""
    from aah.attention import coverage
    from aah.integrations.hf import applied
    from aah.integrations.hf.allocate import full_kv_bytes, kv_shape, plan_kv_bytes
    from aah.integrations.hf.load import load_model
    from aah.integrations.hf.search import calibration_batches
    from aah.integrations.hf.sweep import perplexity
    from aah.plan import WindowPlan

    text = _read(args.text)
    if not Path(args.plan).is_file():
        raise ValueError(f"plan file {args.plan!r} does not exist")
    plan = WindowPlan.load(args.plan)  # any plan file: a search's, a benchmark's, an export
    model, tokenizer = load_model(args.model, args.device)
    batches = calibration_batches(
        model,
        text,
        seq_len=args.seq_len or plan.seq_len,
        batch_size=args.batch_size,
        max_batches=args.max_batches,
        tokenizer=tokenizer,
    )
    t = batches[0].shape[1]
    base = perplexity(model, batches)
    with applied(model, plan, backend=args.backend):
        planned = perplexity(model, batches)
    cov = coverage(plan.windows, t, plan.sinks).causal
    shape = kv_shape(model)
    kv, full = (
        plan_kv_bytes(plan.windows, plan.sinks, shape, t),
        full_kv_bytes(shape, len(plan.windows), t),
    )
    print(f"perplexity without plan: {base:.4f}")
    print(f"perplexity with plan:    {planned:.4f} ({100 * (planned / base - 1):+.3f}%)")
    print(f"causal coverage at T={t}: {cov:.4f}")
    print(f"KV cache per sequence at T={t}: {kv / MB:.3f} MB ({kv / full:.3f} of the full cache)")
    result = {"ppl_full": base, "ppl_plan": planned, "coverage": cov, "seq_len": t}
    print(json.dumps({**result, "kv_bytes": kv, "kv_bytes_full": full}))
    return 0
