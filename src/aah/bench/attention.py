"""Attention benchmark: every CPU backend against SDPA `is_causal`, measured in the same rounds.

For each sequence length, window plan, backend and mode (forward, forward+backward) it reports
the median time, the ratio to SDPA causal, the plan's causal coverage, the backend's executed
ratio, the realised efficiency (coverage / time ratio: 1.0 means savings exactly in proportion
to the skipped context), and the peak memory of one call measured in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
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


def _child_argv(args: argparse.Namespace, tuned: bool) -> list[str]:
    return [
        "-m", "aah.bench.attention", *_forwarded(args)[:-1],
        "--tune-allocator" if tuned else "--no-tune-allocator", "--no-memory",
        "--seq-lens", ",".join(str(t) for t in args.seq_lens), "--plans", ",".join(args.plans),
        "--backends", ",".join(args.backends), "--modes", ",".join(args.modes),
        "--reps", str(args.reps), "--warmup", str(args.warmup),
    ]  # fmt: skip


def compare_allocator(args: argparse.Namespace) -> int:
    """Untuned and tuned runs in alternating fresh processes; medians of each case's ratio."""
    print(
        f"attention benchmark, allocator untuned vs tuned: {args.allocator_rounds} rounds of "
        f"fresh processes (untuned with AAH_TUNE_ALLOCATOR=0, then tuned), each run "
        f"B={args.batch_size} H={args.heads} D={args.head_dim} fp32, threads={args.threads}, "
        f"median of {args.reps} interleaved rounds; ratio = time / SDPA is_causal time in the "
        "same process",
        flush=True,
    )
    ratios: dict[str, dict[tuple, list[float]]] = {"untuned": {}, "tuned": {}}
    for _ in range(args.allocator_rounds):
        for kind in ("untuned", "tuned"):
            env = dict(os.environ, AAH_TUNE_ALLOCATOR="0" if kind == "untuned" else "1")
            proc = subprocess.run(
                [sys.executable, *_child_argv(args, kind == "tuned")],
                capture_output=True, text=True, env=env, check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                raise RuntimeError(f"{kind} run failed: {proc.stderr.strip()[-2000:]}")
            report = json.loads(proc.stdout.strip().splitlines()[-1])
            if report["env"]["allocator_tuned"] != (kind == "tuned"):
                raise RuntimeError(f"the {kind} run reported allocator_tuned wrong")
            for r in report["rows"]:
                key = (r["seq_len"], r["plan"], r["mode"], r["backend"])
                ratios[kind].setdefault(key, []).append(r["ratio"])
            print(f"  round done: {kind}", flush=True)
    rows = []
    print(f"{'T':>6} {'plan':>8} {'mode':>6} {'backend':>8} {'untuned':>8} {'range':>13} "
          f"{'tuned':>8} {'range':>13}")  # fmt: skip
    for key, untuned in ratios["untuned"].items():
        tuned = ratios["tuned"][key]
        row = dict(zip(("seq_len", "plan", "mode", "backend"), key, strict=True))
        row |= {"untuned_ratio": statistics.median(untuned), "untuned_ratios": untuned,
                "tuned_ratio": statistics.median(tuned), "tuned_ratios": tuned}  # fmt: skip
        rows.append(row)
        print(
            f"{key[0]:>6} {key[1]:>8} {key[2]:>6} {key[3]:>8} {row['untuned_ratio']:8.3f} "
            f"{min(untuned):6.3f}-{max(untuned):6.3f} {row['tuned_ratio']:8.3f} "
            f"{min(tuned):6.3f}-{max(tuned):6.3f}"
        )
    env = environment() | {"threads": args.threads, "rounds": args.allocator_rounds}
    print(json.dumps({"benchmark": "attention-allocator", "env": env, "rows": rows}))
    return 0


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
        help="keep large freed blocks in the heap (aah.runtime.tune_allocator); "
        "--no-tune-allocator runs as a user's own script would",
    )
    p.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                   help="peak memory of each case in a fresh process")  # fmt: skip
    p.add_argument(
        "--allocator-rounds", type=int, default=0, metavar="N",
        help="run the whole benchmark N times in each of two kinds of fresh process, "
        "alternated: untuned (AAH_TUNE_ALLOCATOR=0, as a user's own script) and tuned; report "
        "both ratios as medians over the rounds (mallopt is process-wide, so the two cannot "
        "share a process). Memory probes off. Default 0: one run in this process",
    )  # fmt: skip
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
    if args.allocator_rounds < 0:
        raise ValueError(f"--allocator-rounds must be >= 0, got {args.allocator_rounds}")
    if args.allocator_rounds:
        return compare_allocator(args)
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
