"""Attention benchmark: every CPU backend against SDPA `is_causal`, measured in the same rounds.

For each sequence length, window plan, backend and mode (forward, forward+backward) it reports
the median time, the ratio to SDPA causal, the plan's causal coverage, the backend's executed
ratio, the realised efficiency (coverage / time ratio: 1.0 means savings exactly in proportion
to the skipped context), and the peak memory of one call measured in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from aah.attention import coverage, executed_elements, windowed_attention
from aah.attention.cost import causal_pairs
from aah.bench.timing import (
    current_rss_bytes,
    environment,
    interleaved_medians,
    peak_in_subprocess,
    peak_rss_bytes,
    reset_peak_rss,
)
from aah.cli import flags
from aah.runtime import tune_allocator

PLANS = ("all-128", "all-512", "mixed", "paper")
CPU_BACKENDS = ("dense", "banded", "grouped", "flex", "auto")
MODES = ("fwd", "fwdbwd")


def make_plan(name: str, seq_len: int, n_heads: int, seed: int = 0) -> tuple[int, ...]:
    """The benchmark's window plans; `mixed` is 4 x 128 + 2 x 512 + 2 x full for 8 heads."""
    if name.startswith("all-"):
        return (int(name[4:]),) * n_heads
    if name == "mixed":
        if n_heads % 8:
            raise ValueError(f"plan 'mixed' needs a multiple of 8 heads, got {n_heads}")
        per = n_heads // 8
        return (128,) * (4 * per) + (512,) * (2 * per) + (seq_len,) * (2 * per)
    if name == "paper":
        rng = random.Random(seed)
        choices = (seq_len // 8, seq_len // 4, seq_len // 2, seq_len)
        return tuple(rng.choice(choices) for _ in range(n_heads))
    raise ValueError(f"unknown plan {name!r}; choose from {', '.join(PLANS)}")


@dataclass
class Row:
    seq_len: int
    plan: str
    mode: str
    backend: str
    median_ms: float
    sdpa_ms: float
    ratio: float
    causal_coverage: float
    executed_ratio: float
    efficiency: float
    peak_mb: float | None


def _inputs(args: argparse.Namespace, seq_len: int, grad: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    shape_q = (args.batch_size, args.heads, seq_len, args.head_dim)
    shape_kv = (args.batch_size, args.kv_heads or args.heads, seq_len, args.head_dim)
    q = torch.randn(shape_q, generator=gen).requires_grad_(grad)
    k = torch.randn(shape_kv, generator=gen).requires_grad_(grad)
    v = torch.randn(shape_kv, generator=gen).requires_grad_(grad)
    return q, k, v, torch.randn(shape_q, generator=gen)


def _call(
    backend: str, windows: tuple[int, ...], q, k, v, grad_out, mode: str
) -> Callable[[], None]:  # type: ignore[no-untyped-def]
    gqa = k.shape[1] != q.shape[1]

    def attend() -> torch.Tensor:
        if backend == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return windowed_attention(q, k, v, windows, backend=backend)

    def run() -> None:
        if mode == "fwd":
            with torch.no_grad():
                attend()
        else:
            attend().backward(grad_out)
            q.grad = k.grad = v.grad = None

    return run


def _memory_probe(argv: list[str]) -> None:
    """Child process: one call of one case, prints the peak RSS above the inputs' baseline."""
    parser = _parser()
    parser.add_argument("--probe", nargs=4, metavar=("T", "PLAN", "BACKEND", "MODE"))
    args = parser.parse_args(argv)
    if args.tune_allocator:
        tune_allocator()
    _set_threads(args.threads)
    seq_len, plan, backend, mode = int(args.probe[0]), *args.probe[1:]
    q, k, v, g = _inputs(args, seq_len, mode == "fwdbwd")
    windows = make_plan(plan, seq_len, args.heads) if backend != "sdpa" else ()
    base = current_rss_bytes()
    reset_peak_rss()
    _call(backend, windows, q, k, v, g, mode)()
    print(json.dumps({"peak_mb": (peak_rss_bytes() - base) / 2**20}))


def _set_threads(threads: int) -> None:
    if threads:  # 0 leaves torch's default (the shared --threads meaning)
        torch.set_num_threads(threads)


def run_benchmark(args: argparse.Namespace) -> list[Row]:
    _set_threads(args.threads)
    rows: list[Row] = []
    for seq_len in args.seq_lens:
        for plan in args.plans:
            windows = make_plan(plan, seq_len, args.heads)
            cov = coverage(windows, seq_len).causal
            for mode in args.modes:
                q, k, v, g = _inputs(args, seq_len, mode == "fwdbwd")
                backends = [b for b in args.backends if not (b == "flex" and mode == "fwdbwd")]
                fns = {"sdpa": _call("sdpa", windows, q, k, v, g, mode)}
                fns |= {b: _call(b, windows, q, k, v, g, mode) for b in backends}
                medians = interleaved_medians(fns, reps=args.reps, warmup=args.warmup)
                for backend in backends:
                    name = "grouped" if backend == "auto" else backend
                    executed = executed_elements(name, windows, seq_len)
                    ratio = medians[backend] / medians["sdpa"]
                    peak = None
                    if args.memory:
                        case = ["--probe", str(seq_len), plan, backend, mode]
                        probe = ["-m", "aah.bench.attention", *_forwarded(args), *case]
                        peak = peak_in_subprocess(probe)["peak_mb"]
                    rows.append(
                        Row(
                            seq_len,
                            plan,
                            mode,
                            backend,
                            medians[backend] * 1e3,
                            medians["sdpa"] * 1e3,
                            ratio,
                            cov,
                            executed / (len(windows) * causal_pairs(seq_len)),
                            cov / ratio,
                            peak,
                        )
                    )
                    _print_row(rows[-1])
    return rows


def _forwarded(args: argparse.Namespace) -> list[str]:
    return [
        "--threads", str(args.threads), "--batch-size", str(args.batch_size),
        "--heads", str(args.heads), "--head-dim", str(args.head_dim),
        "--kv-heads", str(args.kv_heads or args.heads),
        "--tune-allocator" if args.tune_allocator else "--no-tune-allocator",
    ]  # fmt: skip


HEADER = (
    f"{'T':>6} {'plan':>8} {'mode':>6} {'backend':>8} {'ms':>9} {'sdpa ms':>9} {'ratio':>6} "
    f"{'cover':>6} {'exec':>6} {'effic':>6} {'peak MB':>8}"
)


def _print_row(r: Row) -> None:
    peak = f"{r.peak_mb:8.1f}" if r.peak_mb is not None else f"{'-':>8}"
    print(
        f"{r.seq_len:>6} {r.plan:>8} {r.mode:>6} {r.backend:>8} {r.median_ms:9.1f} "
        f"{r.sdpa_ms:9.1f} {r.ratio:6.3f} {r.causal_coverage:6.3f} {r.executed_ratio:6.3f} "
        f"{r.efficiency:6.2f} {peak}",
        flush=True,
    )


def _csv(kind: Callable[[str], object]) -> Callable[[str], list]:
    return lambda text: [kind(part) for part in text.split(",") if part]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aah bench attention",
        description="Time every CPU attention backend against SDPA is_causal (same rounds).",
    )
    flags.add_seq_lens(p, [1024, 2048, 4096])
    p.add_argument("--plans", type=_csv(str), default=list(PLANS), metavar="NAME,...",
                   help=f"window plans, a comma list (default all: {','.join(PLANS)})")  # fmt: skip
    p.add_argument("--backends", type=_csv(str), default=list(CPU_BACKENDS), metavar="NAME,...",
                   help=f"backends, a comma list (default {','.join(CPU_BACKENDS)})")  # fmt: skip
    p.add_argument("--modes", type=_csv(str), default=list(MODES), metavar="MODE,...",
                   help=f"fwd (no grad), fwdbwd (default {','.join(MODES)})")  # fmt: skip
    flags.add_batch_size(p, "batch size B of q, k, v (default 1)", default=1)
    p.add_argument("--heads", type=int, default=8, help="query heads (default 8)")
    p.add_argument("--kv-heads", type=int, default=0, help="K/V heads (default 0: same as --heads)")
    p.add_argument("--head-dim", type=int, default=64, help="head dimension D (default 64)")
    flags.add_threads(p)
    p.add_argument("--reps", type=int, default=5, help="timed rounds per case (median)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds per case first")
    p.add_argument(
        "--tune-allocator",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep large freed blocks in the heap (aah.runtime.tune_allocator)",
    )
    p.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                   help="peak memory of each case in a fresh process")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--probe" in argv:
        _memory_probe(argv)
        return 0
    args = _parser().parse_args(argv)
    args.seq_lens = flags.int_list(args.seq_lens)
    flags.check_batch_size(args.batch_size)
    flags.check_threads(args.threads)
    tuned = tune_allocator() if args.tune_allocator else False
    for plan in args.plans:
        make_plan(plan, max(args.seq_lens), args.heads)  # fail early on a bad plan name
    _set_threads(args.threads)
    env = environment() | {"threads": torch.get_num_threads(), "allocator_tuned": tuned}
    print(
        f"attention benchmark: B={args.batch_size} H={args.heads} "
        f"Hkv={args.kv_heads or args.heads} "
        f"D={args.head_dim} fp32, threads={env['threads']}, warm-up {args.warmup}, "
        f"median of {args.reps} interleaved rounds, allocator tuned: {tuned}; "
        "ratio = time / SDPA is_causal time"
    )
    print(HEADER)
    rows = run_benchmark(args)
    print(json.dumps({"benchmark": "attention", "env": env, "rows": [asdict(r) for r in rows]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
