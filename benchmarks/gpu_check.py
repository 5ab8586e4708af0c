"""One prepared check for a CUDA machine: correctness of flex/flash/grouped, then timings.

    python benchmarks/gpu_check.py                  # on a CUDA machine (a few minutes)
    python benchmarks/gpu_check.py --device cpu --seq-lens 256 --reps 2   # dry run of the logic

1. Against the float64 oracle, forward and q/k/v gradients: fp32 (abs error bound) and bf16,
   judged by flash-attention's rule: the backend's bf16 error against the fp32 reference is at
   most 2x the error of plain PyTorch attention run in bf16 (plus a tiny absolute slack).
2. Timings at T = 4096, 8192, 16384: each backend vs SDPA is_causal in the same rounds (CUDA
   events, medians), bf16, forward and forward+backward.
Prints a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

from aah.attention import coverage, windowed_attention
from aah.attention.reference import reference_attention
from aah.bench.attention import make_plan

SLACK = 1e-3


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _inputs(b, hq, hkv, t, d, dtype, device, seed=0):  # type: ignore[no-untyped-def]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shapes = [(b, hq, t, d), (b, hkv, t, d), (b, hkv, t, d), (b, hq, t, d)]
    return [torch.randn(s, generator=gen).to(device=device, dtype=dtype) for s in shapes]


def _fwd_bwd(fn, q, k, v, g):  # type: ignore[no-untyped-def]
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    out = fn(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), g)
    return [out.detach(), *grads]


def correctness(args: argparse.Namespace, backends: list[str]) -> list[dict]:
    rows = []
    b, hq, hkv, d = 2, 8, 2, 64
    for t in args.check_lens:
        windows = (1, 17, 128, t // 2, t, 2 * t, 64, 300)
        q, k, v, g = _inputs(b, hq, hkv, t, d, torch.float32, args.device)

        def oracle_fn(q, k, v, windows=windows):  # type: ignore[no-untyped-def]
            return reference_attention(q, k, v, torch.tensor(windows), d**-0.5)

        oracle = _fwd_bwd(oracle_fn, q, k, v, g)
        low = [x.bfloat16() for x in (q, k, v, g)]
        # Plain PyTorch in bf16: the oracle's masked softmax, every op in bf16.
        plain = _fwd_bwd(lambda q, k, v, w=windows: _bf16_math(q, k, v, w), *low)
        plain_err = [
            (p.float() - o.float()).abs().max().item() for p, o in zip(plain, oracle, strict=True)
        ]
        for backend in backends:
            grad_ok = not (backend == "flex" and args.device == "cpu")
            for dtype in (torch.float32, torch.bfloat16):
                if backend == "flash" and dtype == torch.float32:
                    continue  # flash-attn has no fp32 kernel
                xs = [x.to(dtype) for x in (q, k, v, g)]

                def run(q, k, v, backend=backend, windows=windows):  # type: ignore[no-untyped-def]
                    return windowed_attention(q, k, v, windows, backend=backend)

                try:
                    if grad_ok:
                        got = _fwd_bwd(run, *xs)
                    else:
                        with torch.no_grad():
                            got = [run(*xs[:3])]
                except ValueError as e:
                    rows.append({"check": "correctness", "backend": backend, "T": t,
                                 "dtype": str(dtype), "skipped": str(e)})  # fmt: skip
                    continue
                errs = [
                    (x.float() - o.float()).abs().max().item()
                    for x, o in zip(got, oracle, strict=False)
                ]
                if dtype == torch.float32:
                    ok = all(e <= 1e-4 for e in errs)
                else:
                    ok = all(e <= 2 * p + SLACK for e, p in zip(errs, plain_err, strict=False))
                rows.append({"check": "correctness", "backend": backend, "T": t,
                             "dtype": str(dtype), "errors": errs, "plain_bf16": plain_err,
                             "ok": ok})  # fmt: skip
                print(f"{backend:>8} T={t:<6} {dtype!s:>15} "
                      f"max errors (out, dq, dk, dv) {', '.join(f'{e:.2e}' for e in errs)} "
                      f"{'OK' if ok else 'FAIL'}")  # fmt: skip
    return rows


def _bf16_math(q, k, v, windows):  # type: ignore[no-untyped-def]
    from aah.attention.masks import window_mask

    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    allowed = window_mask(torch.tensor(windows, device=q.device), q.shape[2])
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _time(fn, device: str, reps: int) -> list[float]:  # type: ignore[no-untyped-def]
    fn()
    _sync(device)
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            import time

            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def timings(args: argparse.Namespace, backends: list[str]) -> list[dict]:
    rows = []
    b, hq, hkv, d = 1, 16, 16, 64
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    for t in args.seq_lens:
        q, k, v, g = _inputs(b, hq, hkv, t, d, dtype, args.device)
        for plan in ("all-128", "all-512", "mixed", "paper"):
            windows = make_plan(plan, t, hq)
            for mode in ("fwd", "fwdbwd"):
                fns = {"sdpa": _bench_fn(None, windows, q, k, v, g, mode)}
                for backend in backends:
                    if backend == "flex" and mode == "fwdbwd" and args.device == "cpu":
                        continue
                    fns[backend] = _bench_fn(backend, windows, q, k, v, g, mode)
                samples: dict[str, list[float]] = {n: [] for n in fns}
                for _ in range(args.reps):  # interleaved rounds
                    for name, fn in fns.items():
                        try:
                            samples[name] += _time(fn, args.device, 1)
                        except ValueError:
                            samples[name] = []
                base = statistics.median(samples["sdpa"])
                cov = coverage(windows, t).causal
                for name, times in samples.items():
                    if name == "sdpa" or not times:
                        continue
                    ms = statistics.median(times)
                    rows.append({"check": "timing", "T": t, "plan": plan, "mode": mode,
                                 "backend": name, "ms": ms, "sdpa_ms": base, "ratio": ms / base,
                                 "causal_coverage": cov})  # fmt: skip
                    print(
                        f"T={t:<6} {plan:>8} {mode:>6} {name:>8} {ms:9.2f} ms  "
                        f"sdpa {base:9.2f} ms  ratio {ms / base:6.3f}  coverage {cov:.3f}"
                    )
    return rows


def _bench_fn(backend, windows, q, k, v, g, mode):  # type: ignore[no-untyped-def]
    leaves = [x.detach().requires_grad_(mode == "fwdbwd") for x in (q, k, v)]

    def attend():  # type: ignore[no-untyped-def]
        if backend is None:
            return F.scaled_dot_product_attention(*leaves, is_causal=True)
        return windowed_attention(*leaves, windows, backend=backend)

    def run() -> None:
        if mode == "fwd":
            with torch.no_grad():
                attend()
        else:
            attend().backward(g)
            for x in leaves:
                x.grad = None

    return run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--seq-lens", type=lambda s: [int(x) for x in s.split(",")],
                   default=[4096, 8192, 16384])  # fmt: skip
    p.add_argument("--check-lens", type=lambda s: [int(x) for x in s.split(",")],
                   default=[257, 1024])  # fmt: skip
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --device cpu for a dry run")
    backends = ["grouped", "flex", "flash"] if args.device == "cuda" else ["grouped", "flex"]
    env = {"torch": torch.__version__, "device": args.device}
    if args.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(env))
    rows = correctness(args, backends)
    rows += timings(args, backends)
    failed = [r for r in rows if r.get("ok") is False]
    print(json.dumps({"benchmark": "gpu_check", "env": env, "failed": len(failed), "rows": rows}))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
