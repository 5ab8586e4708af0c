"""Decode benchmark on a transformers model: `PerHeadCache` against `DynamicCache` with sdpa.

A Llama-style model is built from a config (random weights, no download). For each context T
and batch size B both caches are prefilled once with the same B x T random prompt, then decode
greedily in interleaved rounds (per-head N tokens, dynamic N tokens, repeated): the first
`--warmup` rounds are not timed, the rest give medians. Each round continues where the last one
stopped, so both caches grow alike (T + rounds x N positions at the end). The per-head cache
runs a plan of one window per KV head: every KV head starts at `--window` (default T/32) with
`--sinks` sinks, then KV heads turn full (one per layer first) while the plan's causal coverage
at T stays <= `--coverage`. Decode tokens/s counts every row: B x N / median round seconds.
KV bytes are read off the caches at the end and the per-head cache's are checked against
B x sum over layers and KV heads of (min(S, t) + min(C, t)) x D x 2 x itemsize.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from aah.attention import coverage
from aah.attention.kv_bytes import held_positions, kv_capacities, kv_sinks
from aah.bench.timing import environment
from aah.cli import flags
from aah.integrations.hf.run.model_layout import cache_keyword
from aah.plan import WindowPlan

CACHES = ("per-head", "dynamic")
DEFAULT_SINKS = 4


def kv_plan_for_coverage(
    n_layer: int, n_head: int, n_kv: int, seq_len: int, full: int, target: float, window: int,
    sinks: int,
) -> list[list[int]]:  # fmt: skip
    """[layer][query head] windows, equal within each KV head: all `window`, then KV heads
    turned to `full` one by one (KV head 0 of every layer, then KV head 1, ...) while the
    causal coverage at `seq_len` with `sinks` stays <= target."""
    group = n_head // n_kv
    plan = [[window] * n_head for _ in range(n_layer)]
    for kv in range(n_kv):
        for layer in range(n_layer):
            heads = range(kv * group, (kv + 1) * group)
            for h in heads:
                plan[layer][h] = full
            if coverage(plan, seq_len, sinks).causal > target:
                for h in heads:
                    plan[layer][h] = window
                return plan
    return plan


def expected_kv_bytes(
    plan: list[list[int]], sink_rows: list[list[int]], n_kv: int, max_len: int, t: int,
    batch: int, unit: int,
) -> int:  # fmt: skip
    """B x sum over layers and KV heads of (min(S, t) + min(C, t)) x unit (D x 2 x itemsize)."""
    caps = kv_capacities(plan, n_kv, max_len)
    slots = kv_sinks(plan, sink_rows, n_kv, max_len)
    return batch * held_positions(caps, slots, t) * unit


def plan_at(path: str, seq_len: int, full: int, sinks: int | None) -> WindowPlan:
    """The plan file at `path` for context `seq_len` (`WindowPlan.at_length`: windows scaled by
    seq_len / the length it was searched at, whole-context heads to `full`), with its own
    sinks, or `sinks` for every head when given."""
    plan = WindowPlan.load(path).at_length(seq_len, full)
    return plan if sinks is None else WindowPlan.of(plan.windows, sinks, plan.seq_len)


def build_model(args: argparse.Namespace, max_len: int) -> torch.nn.Module:
    """`--model` loaded (`hf.run.load.load_model`), else the Llama-style model of the flags; fp32,
    eval mode, sdpa attention."""
    if args.model:
        from aah.integrations.hf.run.load import load_model

        return load_model(args.model, "cpu")[0]
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.d_model, intermediate_size=args.d_model * 8 // 3,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=max_len,
        bos_token_id=0, eos_token_id=1, pad_token_id=1,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).eval()


def dynamic_nbytes(cache: Any) -> int:
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


@dataclass
class Row:
    seq_len: int
    batch: int
    cache: str
    causal_coverage: float
    kv_bytes: int
    kv_ratio: float  # KV bytes over the dynamic cache's, same positions
    prefill_s: float  # one prefill, not a median
    decode_tokens_per_s: float  # B x N / median round seconds
    decode_speedup: float  # over the dynamic cache's, medians of the same rounds
    formula_ok: bool  # per-head: bytes held = reserved = the formula; dynamic: all positions


class _Run:
    """One cache's decoding state: the model's settings, the cache, the next tokens."""

    def __init__(
        self, model: torch.nn.Module, name: str, plan: list[list[int]], sinks: list[list[int]],
        max_len: int,
    ) -> None:  # fmt: skip
        from transformers import DynamicCache

        from aah.integrations import hf

        self.model, self.name, self.plan, self.sinks, self.hf = model, name, plan, sinks, hf
        self.key = cache_keyword(model)
        self.use()
        self.cache = hf.per_head_cache(model, max_len) if name == "per-head" else DynamicCache()
        self.next = torch.empty(0, dtype=torch.long)

    def use(self) -> None:
        """Switch the model to this cache's attention: the plan ("aah") or plain sdpa."""
        if self.name == "per-head":
            self.hf.apply(self.model, self.plan, sinks=self.sinks)
        elif self.hf.current_plan(self.model) is not None:
            self.hf.remove(self.model)

    def step(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self.key: self.cache})
        return out.logits[:, -1].argmax(dim=-1, keepdim=True)

    def prefill(self, prompt: torch.Tensor) -> float:
        self.use()
        start = time.perf_counter()
        self.next = self.step(prompt)
        return time.perf_counter() - start

    def decode(self, n: int) -> float:
        self.use()
        start = time.perf_counter()
        for _ in range(n):
            self.next = self.step(self.next)
        return time.perf_counter() - start


def bench_case(
    model: torch.nn.Module, args: argparse.Namespace, seq_len: int, batch: int
) -> list[Row]:
    """Both caches at one (T, B): prefill, interleaved decode rounds, medians, KV bytes."""
    cfg = model.config
    rounds = args.warmup + args.reps
    max_len = seq_len + rounds * args.new_tokens  # positions fed (not the last token)
    if args.plan:
        planned = plan_at(args.plan, seq_len, max_len, args.sinks)
    else:
        sinks = DEFAULT_SINKS if args.sinks is None else args.sinks
        windows = kv_plan_for_coverage(
            cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, seq_len,
            max_len, args.coverage, args.window or max(1, seq_len // 32), sinks,
        )  # fmt: skip
        planned = WindowPlan.of(windows, sinks)
    plan, sink_rows = planned.windows, planned.sinks
    gen = torch.Generator().manual_seed(args.seed + seq_len + batch)
    prompt = torch.randint(2, cfg.vocab_size, (batch, seq_len), generator=gen)
    times: dict[str, list[float]] = {name: [] for name in CACHES}
    with torch.inference_mode():
        runs = {name: _Run(model, name, plan, sink_rows, max_len) for name in CACHES}
        prefill = {name: run.prefill(prompt) for name, run in runs.items()}
        for r in range(rounds):
            for name in CACHES:  # interleaved: A B A B
                took = runs[name].decode(args.new_tokens)
                if r >= args.warmup:
                    times[name].append(took)
    runs["dynamic"].use()  # the model back on plain sdpa
    from aah.integrations.hf.run.model_layout import layout

    unit = layout(model).head_dim * 2 * 4
    kv = {
        "per-head": runs["per-head"].cache.nbytes(),
        "dynamic": dynamic_nbytes(runs["dynamic"].cache),
    }
    # Every position was fed, so the per-head cache's storage is exactly what it holds.
    held = runs["per-head"].cache.reserved_nbytes() == kv["per-head"]
    expected = expected_kv_bytes(
        plan, sink_rows, cfg.num_key_value_heads, max_len, max_len, batch, unit
    )
    every = batch * cfg.num_hidden_layers * cfg.num_key_value_heads * max_len * unit
    ok = {"per-head": held and kv["per-head"] == expected, "dynamic": kv["dynamic"] == every}
    med = {name: statistics.median(ts) for name, ts in times.items()}
    full = [[max_len] * cfg.num_attention_heads for _ in plan]
    cov = {
        "per-head": coverage(plan, seq_len, sink_rows).causal,
        "dynamic": coverage(full, seq_len).causal,
    }
    return [
        Row(
            seq_len=seq_len,
            batch=batch,
            cache=name,
            causal_coverage=cov[name],
            kv_bytes=kv[name],
            kv_ratio=kv[name] / kv["dynamic"],
            prefill_s=prefill[name],
            decode_tokens_per_s=batch * args.new_tokens / med[name],
            decode_speedup=med["dynamic"] / med[name],
            formula_ok=ok[name],
        )
        for name in CACHES
    ]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aah bench hf-decode", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    flags.add_seq_lens(p, [4096, 16384, 32768])
    p.add_argument(
        "--batch-size", action="append", metavar="B,B,...",
        help="batch sizes, a comma list or the flag repeated (default 1,4)",
    )  # fmt: skip
    p.add_argument("--new-tokens", type=int, default=16, help="tokens per round (default 16)")
    p.add_argument("--reps", type=int, default=5, help="timed rounds (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    p.add_argument(
        "--coverage", type=float, default=0.2, help="plan causal coverage cap (default 0.2)"
    )
    p.add_argument("--window", type=int, default=0, help="short KV heads' window (default 0: T/32)")
    p.add_argument(
        "--sinks", type=int, default=None,
        help=f"attention sinks per head (default: a --plan file's own, else {DEFAULT_SINKS})",
    )  # fmt: skip
    flags.add_threads(p)
    p.add_argument(
        "--model",
        default=None,
        help="a model to load (GGUF file, folder or hub name) instead of a random one",
    )
    p.add_argument(
        "--plan",
        default=None,
        metavar="FILE",
        help="the per-head cache's plan (JSON, e.g. from aah plan search) "
        "instead of --coverage/--window; scaled to each T if it records its seq_len",
    )
    p.add_argument("--layers", type=int, default=4, help="model layers (default 4)")
    p.add_argument("--d-model", type=int, default=256, help="model width (default 256)")
    p.add_argument("--heads", type=int, default=8, help="query heads (default 8)")
    p.add_argument("--kv-heads", type=int, default=2, help="K/V heads (default 2)")
    p.add_argument("--vocab", type=int, default=1024, help="vocabulary size (default 1024)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model and prompts")
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    return p


def check_args(args: argparse.Namespace) -> None:
    """ValueError naming the first bad flag."""
    args.seq_lens = flags.int_list(args.seq_lens, minimum=2)
    args.batch_size = flags.int_list(args.batch_size or ["1,4"], "--batch-size")
    flags.check_threads(args.threads)
    for flag, value, low in (
        ("--new-tokens", args.new_tokens, 1), ("--reps", args.reps, 1),
        ("--warmup", args.warmup, 0), ("--window", args.window, 0),
        ("--sinks", 0 if args.sinks is None else args.sinks, 0),
        ("--layers", args.layers, 1), ("--kv-heads", args.kv_heads, 1), ("--vocab", args.vocab, 2),
    ):  # fmt: skip
        if value < low:
            raise ValueError(f"{flag} must be >= {low}, got {value}")
    if not 0 < args.coverage <= 1:
        raise ValueError(f"--coverage must be in (0, 1], got {args.coverage}")
    if args.heads % args.kv_heads or args.d_model % args.heads:
        raise ValueError(
            f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads} and divide "
            f"--d-model {args.d_model}"
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    from aah.integrations.hf import require_transformers

    require_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    rounds = args.warmup + args.reps
    model = build_model(args, max(args.seq_lens) + rounds * args.new_tokens + 1)
    env = environment()
    cfg = model.config
    what = (
        f"{args.model}: {cfg.num_hidden_layers} layers, {cfg.num_attention_heads} heads / "
        f"{cfg.num_key_value_heads} KV heads"
        if args.model
        else f"Llama-style {args.layers} layers, d_model {args.d_model}, {args.heads} heads / "
        f"{args.kv_heads} KV heads, vocab {args.vocab}"
    )
    plan = (
        f"{args.plan} (+ {'its own' if args.sinks is None else args.sinks} sinks)"
        if args.plan
        else f"KV heads at window {args.window or 'T/32'} + "
        f"{DEFAULT_SINKS if args.sinks is None else args.sinks} sinks or full, "
        f"coverage <= {args.coverage}"
    )
    print(
        f"hf-decode: {what}, fp32; plan: {plan}; {args.new_tokens} tokens per round, "
        f"{args.warmup} warm-up + {args.reps} timed rounds (median, interleaved); threads "
        f"{env['threads']}, torch {env['torch']}",
        flush=True,
    )
    header = (
        f"{'T':>6} {'B':>2} {'cache':>8} {'coverage':>8} {'KV MB':>8} {'KV ratio':>8} "
        f"{'formula':>7} {'prefill s':>9} {'decode tok/s':>12} {'decode x':>8}"
    )
    print(header, flush=True)
    rows: list[Row] = []
    for seq_len in args.seq_lens:
        for batch in args.batch_size:
            for row in bench_case(model, args, seq_len, batch):
                rows.append(row)
                print(
                    f"{row.seq_len:>6} {row.batch:>2} {row.cache:>8} {row.causal_coverage:>8.3f} "
                    f"{row.kv_bytes / 2**20:>8.2f} {row.kv_ratio:>8.3f} "
                    f"{'ok' if row.formula_ok else 'MISMATCH':>7} {row.prefill_s:>9.2f} "
                    f"{row.decode_tokens_per_s:>12,.1f} {row.decode_speedup:>8.2f}",
                    flush=True,
                )
    if args.json:
        config = {k: v for k, v in vars(args).items() if k != "json"}
        print(json.dumps({"benchmark": "hf-decode", "env": env, "config": config,
                          "rows": [asdict(r) for r in rows]}))  # fmt: skip
    return 0
