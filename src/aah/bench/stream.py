"""`aah bench stream MODEL --plan P --text FILE --tokens N`: one long text through a rolling
per-head cache, past the model's positions, measured chunk by chunk.

Each chunk of `--chunk` tokens prints its perplexity (its tokens, each predicted from every token
before it that the plan keeps), the KV MB the cache holds after it and its forward's tokens/s;
`--json` adds one JSON line last with every row and a summary. `--compare` streams the same
tokens three more times: one window with 4 sinks and one window without sinks, each the widest
whose rolling cache holds no more bytes than the plan's, and full attention over transformers'
DynamicCache up to the model's positions (it cannot go further). `--plot PNG` draws perplexity
against position, the model's positions marked.

The summary per stream: the mean chunk perplexity over the chunks past the model's positions
against the mean over the chunks from a quarter of them up to them (8,192 positions: 2,048 -
8,192), whether the KV bytes stayed constant from the first chunk at which every window was
full, and the tokens/s of the last 2,000 tokens against tokens 2,000 - 4,000 (chunks whose
first token lies there). The plan streams with the windows it was searched with, whatever the
length (it is not rescaled).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from aah.bench.stream_arms import Arm, compare_arms
from aah.bench.timing import environment
from aah.cli import flags

RATE_SPAN = 2000  # tokens the tokens/s summary compares: the last ones against 2,000 - 4,000


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aah bench stream",
        description="Stream one long text through a rolling per-head cache, past the model's "
        "positions: per chunk the perplexity, KV MB held and tokens/s.",
    )
    p.add_argument("model", help="a transformers folder, a GGUF file or a hub name")
    p.add_argument("--plan", metavar="FILE", help="the plan (from `aah plan search`)")
    flags.add_default_plan(p)
    p.add_argument("--text", required=True, metavar="FILE",
                   help="the long text to stream (UTF-8): a book, a long source file")  # fmt: skip
    p.add_argument("--tokens", type=int, default=20_000, metavar="N",
                   help="tokens to stream, the tokenizer's BOS first where it adds one "
                   "(default 20000)")  # fmt: skip
    p.add_argument("--chunk", type=int, default=512, metavar="C",
                   help="tokens per forward (default 512)")  # fmt: skip
    p.add_argument("--compare", action="store_true",
                   help="also one window + 4 sinks and one window without sinks at the plan's "
                   "bytes, and full attention up to the model's positions")  # fmt: skip
    p.add_argument("--plot", metavar="PNG", help="draw perplexity against position here")
    p.add_argument("--json", action="store_true", help="print one JSON line last")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    return p


def check_args(args: argparse.Namespace) -> None:
    """ValueError naming the bad value, before the model loads."""
    flags.check_default_plan(args.plan, args.kv_fraction, args.plan_length)
    if args.tokens < 2:
        raise ValueError(f"--tokens must be >= 2, got {args.tokens}")
    if args.chunk < 1:
        raise ValueError(f"--chunk must be >= 1, got {args.chunk}")
    if not Path(args.text).is_file():
        raise ValueError(f"--text {args.text!r} is not a file")
    if args.plot is not None:
        plot = Path(args.plot)
        if plot.suffix.lower() != ".png":
            raise ValueError(f"--plot must name a .png file, got {args.plot!r}")
        if not plot.parent.is_dir():
            raise ValueError(f"--plot {args.plot!r}: folder {str(plot.parent)!r} does not exist")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")


def stream_ids(text_path: str, tokenizer: Any, vocab: int, tokens: int) -> torch.Tensor:
    """The first `tokens` ids of the text, the tokenizer's BOS first where it adds one."""
    from aah.integrations.hf.run.data import encode, prompt_prefix

    prefix = prompt_prefix(tokenizer)
    ids = prefix + encode(Path(text_path).read_text(encoding="utf-8"), tokenizer, vocab)
    if len(ids) < tokens:
        raise ValueError(
            f"--text {text_path!r} holds {len(ids)} tokens: give --tokens {len(ids)} or less, "
            "or a longer text"
        )
    return torch.tensor(ids[:tokens])


def run_arm(model: Any, arm: Arm, ids: torch.Tensor, chunk: int, positions: int) -> list[Any]:
    """Stream `ids` for one arm, printing each chunk's row as it comes."""
    from aah.integrations import hf
    from aah.integrations.hf.run.streaming import stream_perplexity

    if arm.windows is None:
        from transformers import DynamicCache

        hf.remove(model)
        cache, limit = DynamicCache(), positions
    else:
        hf.apply(model, arm.windows, sinks=arm.sinks)
        cache, limit = hf.per_head_cache(model, rolling=True), None

    def show(row: Any) -> None:
        print(
            f"{arm.name:>22} | {row.position:>7} tokens | ppl {row.perplexity:9.3f} | "
            f"KV {row.kv_mb:8.3f} MB | {row.tokens_per_s:8.1f} tok/s",
            flush=True,
        )

    return stream_perplexity(model, ids, cache, chunk=chunk, limit=limit, on_row=show)


def summary(rows: list[Any], positions: int, total: int) -> dict[str, Any]:
    """The figures the module docstring names, for one arm (None where the stream is short)."""
    starts = [0] + [r.position for r in rows[:-1]]  # each chunk's first token
    early = [r.perplexity for r in rows if positions // 4 < r.position <= positions]
    late = [r.perplexity for r, a in zip(rows, starts, strict=True) if a >= positions]
    held = [r.kv_mb for r in rows]
    steady_from = next(
        (rows[i].position for i in range(len(rows)) if len(set(held[i:])) == 1), None
    )

    def rate(lo: int, hi: int) -> float | None:
        """Tokens per second over the chunks whose first token lies in [lo, hi)."""
        picked = [(r, r.position - a) for r, a in zip(rows, starts, strict=True) if lo <= a < hi]
        if not picked:
            return None
        return sum(n for _, n in picked) / sum(n / r.tokens_per_s for r, n in picked)

    first, last = rate(RATE_SPAN, 2 * RATE_SPAN), rate(total - RATE_SPAN, total)
    mean_early = statistics.fmean(early) if early else None
    mean_late = statistics.fmean(late) if late else None
    return {
        "mean_ppl_quarter_to_positions": mean_early,
        "mean_ppl_past_positions": mean_late,
        "ppl_ratio_past_to_before": mean_late / mean_early if mean_early and mean_late else None,
        "kv_constant_from_position": steady_from,
        "tokens_per_s_2000_4000": first,
        "tokens_per_s_last_2000": last,
        "rate_ratio_last_to_early": last / first if first and last else None,
    }


def plot_streams(results: dict[str, list[Any]], positions: int, path: str, title: str) -> None:
    from aah.report.plots import stream_curve

    series = {name: [(r.position, r.perplexity) for r in rows] for name, rows in results.items()}
    stream_curve(series, Path(path), positions, title)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    from aah.integrations.hf.run.load import load_model
    from aah.plan import WindowPlan

    if args.threads:
        torch.set_num_threads(args.threads)
    plan = WindowPlan.load(args.plan) if args.plan else None
    model, tokenizer = load_model(args.model, args.device)
    positions = int(model.config.max_position_embeddings)
    if plan is None:
        from aah.integrations.hf.search.default_plan import default_plan

        plan = default_plan(model, args.kv_fraction, args.plan_length, tokenizer=tokenizer,
                            progress=True)  # fmt: skip
    ids = stream_ids(args.text, tokenizer, int(model.config.vocab_size), args.tokens)
    windows, sinks = plan.windows, plan.sinks
    arms = (
        compare_arms(model, windows, sinks, positions)
        if args.compare
        else [Arm("plan", windows, sinks)]
    )
    env = environment()
    print(
        f"stream: {args.model}, {positions} positions; {len(ids)} tokens of {args.text} in chunks "
        f"of {args.chunk}; plan {args.plan or f'default at KV {args.kv_fraction}'} (T = "
        f"{plan.seq_len}, windows as searched); threads {env['threads']}, torch {env['torch']}",
        flush=True,
    )
    results = {arm.name: run_arm(model, arm, ids, args.chunk, positions) for arm in arms}
    summaries = {name: summary(rows, positions, len(ids)) for name, rows in results.items()}
    for name, s in summaries.items():
        print(f"{name}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in s.items()), file=sys.stderr)
    if args.plot:
        plot_streams(results, positions, args.plot, f"{Path(args.model).name}: streamed perplexity")
    if args.json:
        record = {
            "model": args.model, "text": args.text, "tokens": len(ids), "chunk": args.chunk,
            "positions": positions, "plan": args.plan, "kv_fraction": args.kv_fraction,
            "plan_seq_len": plan.seq_len, "environment": env,
            "arms": {
                arm.name: {"windows": arm.windows, "sinks": arm.sinks,
                           "rows": [r.as_dict() for r in results[arm.name]],
                           "summary": summaries[arm.name]}
                for arm in arms
            },
        }  # fmt: skip
        print(json.dumps(record))
    return 0


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
