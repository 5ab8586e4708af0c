"""Decode benchmark: per-head KV cache against a full cache, on the same model, same rounds.

For each context length T it builds a plan of causal coverage near the target (windows from
{T/16, T/8, T/4, T/2, full}, chosen greedily), then times prefill (one batched forward of T
tokens) and greedy decoding of N tokens with that plan and with every head full (every head
caches all t positions: the same code, plan set to full). Cases run interleaved (A B A B) and
report medians; KV bytes are checked against sum over layers and KV heads of
min(w, t) * D * 2 * element size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass

import torch

from aah.attention import coverage
from aah.bench.timing import environment
from aah.cli import flags
from aah.model import GPT, GPTConfig
from aah.model.cache import KVCache
from aah.model.sampling import GREEDY, sample

VARIANTS = ("per-head", "full")


def plan_for_coverage(
    n_layer: int, n_head: int, seq_len: int, full: int, target: float
) -> list[list[int]]:
    """Windows from {T/16, T/8, T/4, T/2, full}: every head starts at T/16; visiting heads
    head-major across layers, each takes the largest window keeping the plan's causal
    coverage (at T) <= target. `full` is the window used for whole-context heads."""
    choices = [max(1, seq_len // d) for d in (16, 8, 4, 2)] + [full]
    plan = [[choices[0]] * n_head for _ in range(n_layer)]
    for h in range(n_head):
        for layer in range(n_layer):
            for w in reversed(choices[1:]):
                plan[layer][h] = w
                if coverage(plan, seq_len).causal <= target:
                    break
                plan[layer][h] = choices[0]
    return plan


def expected_kv_bytes(plan: list[list[int]], n_kv_head: int, t: int, head_dim: int) -> int:
    """sum over layers and KV heads of min(w, t) * D * 2 * 4 (fp32, batch 1), w the largest
    window of the KV head's query heads."""
    total = 0
    for row in plan:
        g = len(row) // n_kv_head
        total += sum(min(max(row[j * g : (j + 1) * g]), t) for j in range(n_kv_head))
    return total * head_dim * 2 * 4


@dataclass
class Row:
    context: int
    variant: str
    causal_coverage: float
    acr: float
    kv_bytes: int
    kv_bytes_expected: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    decode_speedup: float  # decode tokens/s over the full cache's, same rounds
    kv_ratio: float  # KV bytes over the full cache's


def _run_once(model: GPT, idx: torch.Tensor, new: int) -> tuple[float, float, KVCache]:
    """(prefill seconds, decode seconds for `new` tokens, the cache at the end)."""
    start = time.perf_counter()
    cache = model.make_cache(idx.shape[0], idx.shape[1] + new)
    logits = model(idx, cache=cache)[:, -1]  # (B, V)
    mid = time.perf_counter()
    for _ in range(new):
        logits = model(sample(logits, GREEDY)[:, None], cache=cache)[:, -1]
    return mid - start, time.perf_counter() - mid, cache


def bench_context(model: GPT, args: argparse.Namespace, context: int) -> list[Row]:
    cfg = model.config
    plans = {
        "per-head": plan_for_coverage(
            cfg.n_layer, cfg.n_head, context, cfg.max_seq_len, args.coverage
        ),
        "full": [[cfg.max_seq_len] * cfg.n_head for _ in range(cfg.n_layer)],
    }
    gen = torch.Generator().manual_seed(args.seed)
    idx = torch.randint(0, cfg.vocab_size, (1, context), generator=gen)
    times: dict[str, tuple[list[float], list[float]]] = {v: ([], []) for v in VARIANTS}
    kv: dict[str, int] = {}
    with torch.inference_mode():
        for rep in range(args.warmup + args.reps):
            for variant in VARIANTS:  # interleaved: A B A B
                model.set_window_plan(plans[variant])
                pre, dec, cache = _run_once(model, idx, args.new_tokens)
                kv[variant] = cache.nbytes()
                if rep >= args.warmup:
                    times[variant][0].append(pre)
                    times[variant][1].append(dec)
    t_end = context + args.new_tokens
    med = {v: (statistics.median(p), statistics.median(d)) for v, (p, d) in times.items()}
    rows = []
    for variant in VARIANTS:
        cov = coverage(plans[variant], context)
        rows.append(
            Row(
                context=context,
                variant=variant,
                causal_coverage=cov.causal,
                acr=cov.acr,
                kv_bytes=kv[variant],
                kv_bytes_expected=expected_kv_bytes(
                    plans[variant], cfg.n_kv_head, t_end, cfg.head_dim
                ),
                prefill_tokens_per_s=context / med[variant][0],
                decode_tokens_per_s=args.new_tokens / med[variant][1],
                decode_speedup=med["full"][1] / med[variant][1],
                kv_ratio=kv[variant] / kv["full"],
            )
        )
    return rows


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aah bench decode", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    flags.add_seq_lens(p, [1024, 4096, 16384], aliases=["--contexts"])
    p.add_argument("--new-tokens", type=int, default=64, help="decoded tokens per run")
    p.add_argument("--coverage", type=float, default=0.3, help="target causal coverage")
    p.add_argument("--reps", type=int, default=3, help="measured rounds (A B per round)")
    p.add_argument("--warmup", type=int, default=0, help="unmeasured rounds per context")
    flags.add_threads(p)
    p.add_argument("--layers", type=int, default=4, help="model layers (default 4)")
    p.add_argument("--d-model", type=int, default=256, help="model width (default 256)")
    p.add_argument("--heads", type=int, default=8, help="query heads (default 8)")
    p.add_argument("--kv-heads", type=int, default=0, help="K/V heads (default 0: same as --heads)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model and prompts (default 0)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.seq_lens = flags.int_list(args.seq_lens, minimum=16)
    flags.check_threads(args.threads)
    if args.new_tokens < 1 or args.reps < 1 or args.warmup < 0:
        raise ValueError("need --new-tokens >= 1, --reps >= 1, --warmup >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    config = GPTConfig(
        n_layer=args.layers,
        n_head=args.heads,
        n_kv_head=args.kv_heads or args.heads,
        d_model=args.d_model,
        max_seq_len=max(args.seq_lens) + args.new_tokens,
    )
    model = GPT(config).eval()
    with torch.inference_mode():  # one short unmeasured run warms every code path up
        warm = torch.zeros(1, min(256, *args.seq_lens), dtype=torch.long)
        _run_once(model, warm, min(4, args.new_tokens))
    env = environment()
    print(
        f"decode: {args.layers} layers, d_model {args.d_model}, {config.n_head} heads / "
        f"{config.n_kv_head} KV heads, batch 1, {args.new_tokens} new tokens, "
        f"threads {env['threads']}, torch {env['torch']}, {args.reps} rounds (median)"
    )
    header = (
        f"{'context':>7} {'cache':>8} {'coverage':>8} {'KV MB':>8} {'KV ratio':>8} "
        f"{'formula':>7} {'prefill tok/s':>13} {'decode tok/s':>12} {'decode x':>8}"
    )
    print(header)
    print("-" * len(header))
    rows: list[Row] = []
    for context in args.seq_lens:
        for row in bench_context(model, args, context):
            rows.append(row)
            ok = "ok" if row.kv_bytes == row.kv_bytes_expected else "MISMATCH"
            print(
                f"{row.context:>7} {row.variant:>8} {row.causal_coverage:>8.3f} "
                f"{row.kv_bytes / 2**20:>8.2f} {row.kv_ratio:>8.3f} {ok:>7} "
                f"{row.prefill_tokens_per_s:>13,.0f} {row.decode_tokens_per_s:>12,.1f} "
                f"{row.decode_speedup:>8.2f}"
            )
    result = {
        "benchmark": "decode",
        "env": env,
        "config": {k: v for k, v in vars(args).items()},
        "model": {"n_kv_head": config.n_kv_head, "max_seq_len": config.max_seq_len},
        "rows": [asdict(r) for r in rows],
        "kv_formula_ok": all(r.kv_bytes == r.kv_bytes_expected for r in rows),
    }
    print(json.dumps(result))
    return 0
