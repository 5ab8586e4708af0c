"""`aah lab masks`: the attention-variants chapter's practice task as a command.

It shows that the causal mask zeroes the upper triangle (a corner of the mask and the count of
nonzero softmax weights above the diagonal), counts the allowed (query, key) connections of
full causal attention, n (n + 1) / 2, against a local window, sum_i min(i + 1, w) ~ n w, both
exactly and by formula, and times full causal against windowed attention (medians), stating
device, sequence length, batch, dtype and warm-up count. What changes is connectivity only:
not K/V sharing, positions or the execution kernel.
"""

from __future__ import annotations

import argparse
import statistics
import time

from aah.cli import flags

EXPERIMENTS = ("masks",)
_DTYPES = ("float32", "float64", "bfloat16")


def add_lab_arguments(parser: argparse.ArgumentParser | argparse._SubParsersAction) -> None:
    """Add `lab` options to a parser, or a `lab` subcommand when given a subparsers object."""
    if isinstance(parser, argparse._SubParsersAction):
        parser = parser.add_parser("lab", help="Small teaching experiments: 'masks'.")
    parser.add_argument("experiment", choices=EXPERIMENTS, help="which experiment")
    parser.add_argument("--seq-len", type=int, required=True, help="sequence length n")
    parser.add_argument("--window", type=int, required=True, help="local window w (>= 1)")
    flags.add_batch_size(parser, "batch size of q, k, v (default 1)", default=1)
    parser.add_argument("--heads", type=int, default=8, help="attention heads (default 8)")
    parser.add_argument("--head-dim", type=int, default=32, help="head dimension (default 32)")
    parser.add_argument("--dtype", choices=_DTYPES, default="float32",
                        help="dtype of q, k, v (default float32)")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before timing")
    parser.add_argument("--reps", type=int, default=10, help="timed calls (median reported)")
    parser.add_argument("--corner", type=int, default=6, help="rows/cols of the mask shown")
    parser.add_argument("--seed", type=int, default=0, help="seed of q, k, v (default 0)")
    flags.add_threads(parser)


def _check(args: argparse.Namespace) -> None:
    flags.check_threads(args.threads)
    for name in ("seq_len", "window", "batch_size", "heads", "head_dim", "reps", "corner"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")


def _median_seconds(fn, warmup: int, reps: int) -> float:  # type: ignore[no-untyped-def]
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_lab(args: argparse.Namespace, extra: list[str] | None = None) -> int:
    """Run the experiment; print the mask corner, the counts and the timings. Exit code 0."""
    if extra:
        raise ValueError(f"unrecognized arguments: {' '.join(extra)}")
    _check(args)
    import torch
    import torch.nn.functional as F

    from aah.attention import windowed_attention
    from aah.attention.cost import causal_pairs, window_pairs
    from aah.attention.masks import window_allows

    n, w = args.seq_len, args.window
    dtype = getattr(torch, args.dtype)
    device = torch.device("cpu")
    gen = torch.Generator().manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = (args.batch_size, args.heads, n, args.head_dim)
    q, k, v = (torch.randn(shape, generator=gen).to(dtype) for _ in range(3))

    # 1. The causal mask M (0 allowed, -inf blocked) and a real softmax under it.
    pos = torch.arange(n)
    causal = window_allows(pos[:, None], pos[None, :], n)  # (n, n): key j <= query i
    c = min(args.corner, n)
    print(f"causal mask M[:{c}, :{c}] (0 = allowed, -inf = blocked; upper triangle blocked):")
    for i in range(c):
        print("  " + " ".join(" 0  " if causal[i, j] else "-inf" for j in range(c)))
    # Weights of batch row 0 only (and of head 0 only for long sequences): O(H n^2) memory.
    heads = args.heads if args.heads * n * n <= 2**27 else 1
    scores = q[0, :heads].float() @ k[0, :heads].float().transpose(-1, -2) / args.head_dim**0.5
    weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    above = int((weights.triu(1) != 0).sum())
    print(
        f"softmax weights above the diagonal that are nonzero: {above} "
        f"(of {heads * n * (n - 1) // 2} checked, batch row 0, {heads} heads)"
    )

    # 2. Allowed connections: full causal against a local window of w.
    local = window_allows(pos[:, None], pos[None, :], w)
    full_count, local_count = int(causal.sum()), int(local.sum())
    we = min(w, n)
    print(f"allowed connections per head, n = {n}, w = {w}:")
    print(f"  full square (no mask): n^2 = {n * n}")
    print(f"  full causal: {full_count} (formula n(n+1)/2 = {causal_pairs(n)})")
    print(
        f"  local window: {local_count} (formula w'(w'+1)/2 + (n-w')w' with w' = min(w, n) "
        f"= {window_pairs(w, n)}; approx n w = {n * we})"
    )
    print(f"  ratio local / full causal: {local_count / full_count:.4f}")
    print("  why ~n w: each query reads at most w keys, so the count grows with n w, not n^2")

    # 3. Timing (forward only, medians).
    windows = (w,) * args.heads

    def full() -> None:
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def windowed() -> None:
        with torch.no_grad():
            windowed_attention(q, k, v, windows)

    t_full = _median_seconds(full, args.warmup, args.reps)
    t_local = _median_seconds(windowed, args.warmup, args.reps)
    print(
        f"timing: device={device.type} threads={torch.get_num_threads()} seq_len={n} "
        f"batch={args.batch_size} heads={args.heads} head_dim={args.head_dim} dtype={args.dtype} "
        f"warmup={args.warmup} reps={args.reps} (forward, median)"
    )
    print(f"  full causal (SDPA is_causal): {t_full * 1e3:.3f} ms")
    print(f"  local window w={w} (windowed_attention, auto backend): {t_local * 1e3:.3f} ms")
    print(f"  time ratio local / full: {t_local / t_full:.3f}")
    print(
        "what changed: connectivity (which keys a query may read), not K/V sharing, "
        "positions or the execution kernel"
    )
    return 0
