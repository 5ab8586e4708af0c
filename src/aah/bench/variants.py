"""Variants benchmark: time and peak memory of fwd+bwd per attention variant, and val bits per
byte after a short equal-token training run of a tiny model using that variant; one table, and
one JSON object as the last stdout line.

Timing: B=1, H=8, D=32 by default, at each --seq-lens; a case whose estimated memory exceeds
--max-gb is skipped with a note. Peak memory is the process's high-water RSS above the inputs,
for one call after the timed ones (CPU; the glibc allocator returns large blocks to the OS).
Training: every case sees the same batches (same seed) for --steps steps.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import dataclass
from typing import get_args

import torch
import torch.nn.functional as F
from torch import nn

from aah.attention.variants import make_variant
from aah.bench.timing import (
    current_rss_bytes,
    environment,
    peak_in_subprocess,
    peak_rss_bytes,
    reset_peak_rss,
)
from aah.choices import ConnectivityVariant
from aah.cli import flags


@dataclass(frozen=True)
class Case:
    label: str
    variant: str
    position: str = "rope"  # rope/none act outside attention; alibi/relative are score biases
    plan: str = "full"  # "full" or "mixed" (a quarter each of T/32, T/8, T/2 and T)
    kv_heads: int = 0  # 0 = as many as query heads
    options: tuple[tuple[str, object], ...] = ()


CASES = (
    Case("softmax", "softmax"),
    Case("softmax+windows", "softmax", plan="mixed"),
    Case("softmax+windows gqa2", "softmax", plan="mixed", kv_heads=2),
    Case("softmax mqa", "softmax", kv_heads=1),
    Case("alibi", "softmax", position="alibi"),
    Case("alibi+windows", "softmax", position="alibi", plan="mixed"),
    Case("relative+windows", "softmax", position="relative", plan="mixed"),
    Case("bilinear+windows", "bilinear", plan="mixed"),
    Case("additive", "additive"),
    # Blocks of 16: with 64-blocks and one local block, T=128 training would be full causal.
    Case(
        "block-sparse", "block-sparse", options=(("block", 16), ("local_blocks", 1), ("stride", 4))
    ),
    Case("global-tokens+windows", "global-tokens", plan="mixed"),
    Case("low-rank", "low-rank"),
    Case("kernel elu", "kernel"),
    Case("kernel favor", "kernel-favor"),
)


def plan_for(case: Case, seq_len: int, n_head: int) -> tuple[int, ...]:
    if case.plan == "full":
        return (seq_len,) * n_head
    quarter = max(1, n_head // 4)
    widths = [max(1, seq_len // 32), max(1, seq_len // 8), max(1, seq_len // 2), seq_len]
    return tuple(widths[min(h // quarter, 3)] for h in range(n_head))


def estimate_gb(case: Case, seq_len: int, n_head: int, head_dim: int) -> float:
    """Rough peak of one fwd+bwd: what would not fit is skipped rather than swapped."""
    square = n_head * seq_len * seq_len * 4  # one fp32 (H, T, T) tensor
    if case.variant == "additive":
        return (4 * square + n_head * 128 * seq_len * max(1, head_dim // 2) * 4 * 3) / 1e9
    if case.variant in get_args(ConnectivityVariant) or case.position != "rope":
        return 4 * square / 1e9
    return 0.1


def build(case: Case, n_head: int, head_dim: int, seq_len: int) -> nn.Module:
    return make_variant(
        case.variant,
        n_head=n_head,
        n_kv_head=case.kv_heads or n_head,
        head_dim=head_dim,
        max_seq_len=seq_len,
        position="none" if case.position == "rope" else case.position,
        **dict(case.options),
    )


def time_case(case: Case, args: argparse.Namespace, seq_len: int) -> dict:
    h, d = args.heads, args.head_dim
    module = build(case, h, d, seq_len)
    gen = torch.Generator().manual_seed(0)
    kv = case.kv_heads or h
    q = torch.randn(1, h, seq_len, d, generator=gen).requires_grad_(True)
    k = torch.randn(1, kv, seq_len, d, generator=gen).requires_grad_(True)
    v = torch.randn(1, kv, seq_len, d, generator=gen).requires_grad_(True)
    windows = plan_for(case, seq_len, h)

    def step() -> None:
        module(q, k, v, windows).sum().backward()
        q.grad = k.grad = v.grad = None

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = None
    if args.memory:
        probe = ["-m", "aah.bench.variants", "--probe", case.label, str(seq_len)]
        probe += ["--heads", str(h), "--head-dim", str(d), "--threads", str(args.threads)]
        peak = peak_in_subprocess(probe)["peak_mb"]
    return {"ms": statistics.median(times) * 1e3, "peak_mb": peak}


def _probe(args: argparse.Namespace) -> int:
    """Child process: one fwd+bwd of one case; prints the peak RSS above the inputs (MB)."""
    label, seq_len = args.probe[0], int(args.probe[1])
    case = next(c for c in CASES if c.label == label)
    h, d, kv = args.heads, args.head_dim, case.kv_heads or args.heads
    module = build(case, h, d, seq_len)
    q = torch.randn(1, h, seq_len, d).requires_grad_(True)
    k = torch.randn(1, kv, seq_len, d).requires_grad_(True)
    v = torch.randn(1, kv, seq_len, d).requires_grad_(True)
    base = current_rss_bytes()
    reset_peak_rss()
    module(q, k, v, plan_for(case, seq_len, h)).sum().backward()
    print(json.dumps({"peak_mb": (peak_rss_bytes() - base) / 2**20}))
    return 0


class TinyLM(nn.Module):
    """Byte-level pre-norm decoder whose attention is one variant (RoPE unless a bias)."""

    def __init__(self, case: Case, n_layer: int, n_head: int, d_model: int, seq_len: int) -> None:
        super().__init__()
        from aah.model.positions import NoPosition, RotaryPosition

        d = d_model // n_head
        self.n_head, self.n_kv, self.d = n_head, case.kv_heads or n_head, d
        self.windows = plan_for(case, seq_len, n_head)
        self.rope = RotaryPosition(seq_len, d, 10000.0) if case.position == "rope" else NoPosition()
        self.embed = nn.Embedding(256, d_model)
        self.layers = nn.ModuleList()
        for _ in range(n_layer):
            layer = nn.ModuleDict(
                {
                    "n1": nn.RMSNorm(d_model),
                    "qkv": nn.Linear(d_model, (n_head + 2 * self.n_kv) * d, bias=False),
                    "attn": build(case, n_head, d, seq_len),
                    "proj": nn.Linear(d_model, d_model, bias=False),
                    "n2": nn.RMSNorm(d_model),
                    "up": nn.Linear(d_model, 4 * d_model, bias=False),
                    "down": nn.Linear(4 * d_model, d_model, bias=False),
                }
            )
            self.layers.append(layer)
        self.norm = nn.RMSNorm(d_model)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.embed(idx)
        for layer in self.layers:
            h = layer["n1"](x)
            widths = [self.n_head * self.d, self.n_kv * self.d, self.n_kv * self.d]
            q, k, v = layer["qkv"](h).split(widths, -1)
            q = q.view(b, t, self.n_head, self.d).transpose(1, 2)
            k = k.view(b, t, self.n_kv, self.d).transpose(1, 2)
            v = v.view(b, t, self.n_kv, self.d).transpose(1, 2)
            q, k = self.rope.rotate(q, k)
            y = layer["attn"](q, k, v, self.windows).transpose(1, 2).reshape(b, t, -1)
            x = x + layer["proj"](y)
            x = x + layer["down"](F.gelu(layer["up"](layer["n2"](x))))
        return F.linear(self.norm(x), self.embed.weight)


def train_case(case: Case, args: argparse.Namespace, splits) -> dict:  # type: ignore[no-untyped-def]
    from aah.data import BatchLoader, eval_batches

    torch.manual_seed(args.seed)
    model = TinyLM(
        case, args.train_layers, args.train_heads, args.train_d_model, args.train_seq_len
    )
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    loader = BatchLoader(splits.train, args.train_batch, args.train_seq_len, seed=args.seed)
    start = time.perf_counter()
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / 20)  # short warm-up, then constant
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = loader.next_batch()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    train_s = time.perf_counter() - start
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in eval_batches(
            splits.val, args.train_batch, args.train_seq_len, args.eval_batches
        ):
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    return {"val_bpb": total / count / math.log(2), "train_s": train_s}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aah bench variants", description=__doc__.split("\n")[0])
    flags.add_seq_lens(p, [1024, 4096])
    p.add_argument("--heads", type=int, default=8, help="query heads of timed cases (default 8)")
    p.add_argument("--head-dim", type=int, default=32, help="head dimension (default 32)")
    p.add_argument("--reps", type=int, default=3, help="timed fwd+bwd calls (median, default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls first (default 1)")
    p.add_argument("--max-gb", type=float, default=4.0, help="skip cases estimated above this")
    p.add_argument("--cases", nargs="+", default=None, help="labels to run (default: all)")
    p.add_argument("--steps", type=int, default=150, help="training steps per case (0: none)")
    p.add_argument("--train-seq-len", type=int, default=128,
                   help="sequence length of the training runs (default 128)")  # fmt: skip
    p.add_argument("--train-batch", type=int, default=8,
                   help="batch size of the training runs (default 8)")  # fmt: skip
    p.add_argument("--train-layers", type=int, default=2, help="layers of the trained model")
    p.add_argument("--train-heads", type=int, default=4, help="heads of the trained model")
    p.add_argument("--train-d-model", type=int, default=128, help="width of the trained model")
    p.add_argument("--lr", type=float, default=3e-3, help="learning rate (default 3e-3)")
    p.add_argument("--eval-batches", type=int, default=8, help="validation batches per case")
    p.add_argument("--max-bytes", type=int, default=2_000_000, help="corpus bytes to load")
    p.add_argument("--seed", type=int, default=0, help="seed of inputs and training (default 0)")
    flags.add_threads(p)
    p.add_argument(
        "--no-memory",
        dest="memory",
        action="store_false",
        help="skip the peak-memory probes (one fresh process per case and T)",
    )
    p.add_argument(
        "--additive-max-t",
        type=int,
        default=2048,
        help="time additive only up to this T (its tanh term is O(T^2 D') work)",
    )
    p.add_argument("--probe", nargs=2, metavar=("CASE", "T"), help=argparse.SUPPRESS)
    return p


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.seq_lens = flags.int_list(args.seq_lens)
    flags.check_threads(args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.probe:
        return _probe(args)
    cases = [c for c in CASES if args.cases is None or c.label in args.cases]
    if not cases:
        raise ValueError(f"no case matches {args.cases}; labels: {[c.label for c in CASES]}")
    splits = None
    if args.steps > 0:
        from aah.data import DataConfig, load_tokens

        splits = load_tokens(DataConfig(max_bytes=args.max_bytes))
    results = []
    for case in cases:
        row: dict = {
            "case": case.label,
            "variant": case.variant,
            "position": case.position,
            "plan": case.plan,
            "kv_heads": case.kv_heads or args.heads,
        }
        for seq_len in args.seq_lens:
            gb = estimate_gb(case, seq_len, args.heads, args.head_dim)
            if gb > args.max_gb:
                row[f"T{seq_len}"] = {"skipped": f"estimated {gb:.1f} GB > {args.max_gb} GB"}
            elif case.variant == "additive" and seq_len > args.additive_max_t:
                row[f"T{seq_len}"] = {"skipped": "additive is O(T^2 D') work; T > --additive-max-t"}
            else:
                row[f"T{seq_len}"] = time_case(case, args, seq_len)
        if splits is not None:
            row |= train_case(case, args, splits)
        results.append(row)
        print(f"done: {case.label}", flush=True)
    head = f"{'case':<24}" + "".join(f"{f'T={t} ms':>12}{'MB':>8}" for t in args.seq_lens)
    print(head + f"{'val_bpb':>9}{'train_s':>9}")
    for row in results:
        line = f"{row['case']:<24}"
        for t in args.seq_lens:
            cell = row[f"T{t}"]
            line += f"{_cell(cell.get('ms'), '.1f'):>12}{_cell(cell.get('peak_mb'), '.0f'):>8}"
        line += f"{_cell(row.get('val_bpb'), '.3f'):>9}{_cell(row.get('train_s'), '.1f'):>9}"
        print(line)
    notes = [
        f"{r['case']} T={t}: {r[f'T{t}']['skipped']}"
        for r in results
        for t in args.seq_lens
        if "skipped" in r[f"T{t}"]
    ]
    for note in notes:
        print("skipped:", note)
    config = {k: v for k, v in vars(args).items() if k != "cases"}
    print(
        json.dumps(
            {"benchmark": "variants", "config": config, "env": environment(), "rows": results}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
