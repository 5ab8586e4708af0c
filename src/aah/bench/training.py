"""Training throughput of full attention vs windowed plans, measured interleaved in one run.

For each sequence length, one demo-size model takes optimizer steps under each plan in
turn, so drift in machine speed hits all plans alike; the median of the timed steps gives
tokens/s. Plans: full; fixed T/4; and the plan each controller policy (budget 0.3 and the
aah-v3 regimes) picks from the model's own Q/K/V. One control interval's work (the decision
and the AAH-v3 feature pass) is timed again beside each of the policy's steps; the median,
over one interval of steps plus itself, is the controller's share of training time.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from aah.cli import flags
from aah.controller import QKV, ControllerConfig, Policy, make_policy
from aah.controller.options import Scheduled
from aah.eval.evaluate import plan_diagnostics
from aah.model import GPT, GPTConfig
from aah.training.distributed import resolve_device

POLICIES = (
    "budget",
    "aah-v3-full-adaptive",
    "aah-v3-shallow-freeze",
    "aah-v3-deep-reuse",
    "aah-v3-grouping-off",
)


ControlTimer = Callable[[], float]


def _fresh_policy(model: GPT, name: str, budget: float, feature_rows: int) -> tuple[int, Policy]:
    """(interval, a new policy) as training builds it, deciding from its first update."""
    cfg = model.config
    control = ControllerConfig(name, warmup_steps=0, budget=budget, feature_rows=feature_rows)
    policy = make_policy(
        control, n_layer=cfg.n_layer, n_head=cfg.n_head, n_kv_head=cfg.n_kv_head,
        seq_len=cfg.max_seq_len,
    )  # fmt: skip
    return control.options_as(Scheduled).interval, policy


def _control_seconds(
    model: GPT,
    name: str,
    budget: float,
    feature_rows: int,
    acts: QKV,
    before_next: int,
    under_plan: QKV | None,
) -> float:
    """Seconds of one interval's control work, replayed on a fresh policy: its first decision
    on `acts` and, when it measures the step before its next decision, that update too."""
    _, policy = _fresh_policy(model, name, budget, feature_rows)
    _sync(acts)
    start = time.perf_counter()
    policy.update(0, acts)
    if under_plan is not None:
        policy.update(before_next, under_plan)
    _sync(acts)
    return time.perf_counter() - start


def _sync(acts: QKV) -> None:
    """Wait for queued CUDA work, so a timer reads the work itself."""
    if torch.cuda.is_available() and acts and acts[0][0].is_cuda:
        torch.cuda.synchronize()


def policy_plans(
    model: GPT, x: torch.Tensor, policies: tuple[str, ...], budget: float, feature_rows: int = 0
) -> dict[str, tuple[list[list[int]], ControlTimer]]:
    """Each policy's first decision on the model's own Q/K/V, and a timer of one interval's
    control work: the decision, plus the measurement pass a policy runs on the step before
    its next decision (the AAH-v3 attention features). The timer replays both on a fresh
    policy and the same activations, so it can be called once per timed step (A B A B)."""
    cfg = model.config
    full = [[cfg.max_seq_len] * cfg.n_head for _ in range(cfg.n_layer)]
    model.set_window_plan(full)
    with torch.no_grad(), model.capturing() as acts:
        model(x)
    out: dict[str, tuple[list[list[int]], ControlTimer]] = {}
    for name in policies:
        interval, policy = _fresh_policy(model, name, budget, feature_rows)
        plan = policy.update(0, acts)
        assert plan is not None
        before_next = interval - 1
        under_plan = None
        if before_next > 0 and policy.wants_activations(before_next):
            # As in training: that step's forward ran under the new plan (not timed).
            model.set_window_plan(plan)
            with torch.no_grad(), model.capturing() as under_plan:
                model(x)

        timer = functools.partial(
            _control_seconds, model, name, budget, feature_rows, acts, before_next, under_plan
        )
        out[name] = (plan, timer)
    model.set_window_plan(full)
    return out


def bench_training(
    seq_lens: list[int],
    *,
    batch_size: int = 2,
    steps: int = 3,
    warmup: int = 1,
    threads: int = 0,
    backend: str = "auto",
    device: str = "cpu",
    n_layer: int = 4,
    d_model: int = 256,
    n_head: int = 8,
    d_ff: int = 0,
    policies: tuple[str, ...] = POLICIES,
    budget: float = 0.3,
    interval: int = 5,
    feature_rows: int = 0,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Rows of (seq_len, plan) timings; `on_row` receives each row as soon as it is done."""
    if threads:
        torch.set_num_threads(threads)
    dev = resolve_device(device, what="--device")
    rows = []
    for seq_len in seq_lens:
        torch.manual_seed(0)
        config = GPTConfig(
            n_layer=n_layer,
            n_head=n_head,
            n_kv_head=n_head,
            d_model=d_model,
            d_ff=d_ff,
            max_seq_len=seq_len,
            backend=backend,
        )
        model = GPT(config).to(dev)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(0, 256, (batch_size, seq_len + 1), device=dev)
        decided = policy_plans(model, x[:, :-1], policies, budget, feature_rows)
        plans = {
            "full": [[seq_len] * n_head for _ in range(n_layer)],
            "fixed-T/4": [[max(1, seq_len // 4)] * n_head for _ in range(n_layer)],
        } | {name: plan for name, (plan, _) in decided.items()}
        times: dict[str, list[float]] = {name: [] for name in plans}
        control_s: dict[str, list[float]] = {name: [] for name in decided}
        for i in range(warmup + steps):
            for name, plan in plans.items():  # interleaved: drift hits every plan alike
                model.set_window_plan(plan)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                logits = model(x[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                if i >= warmup:
                    times[name].append(time.perf_counter() - start)
                if name in decided:  # this interval's control work, beside its steps
                    seconds = decided[name][1]()
                    if i >= warmup:
                        control_s[name].append(seconds)
        full_s = statistics.median(times["full"])
        for name, plan in plans.items():
            median = statistics.median(times[name])
            diag = plan_diagnostics(plan, seq_len)
            update_s = statistics.median(control_s[name]) if name in decided else 0.0
            rows.append(
                {
                    "seq_len": seq_len,
                    "plan": name,
                    "acr": round(diag["acr"], 4),
                    "causal_coverage": round(diag["causal_coverage"], 4),
                    "executed_ratio": round(diag.get("executed_ratio", float("nan")), 4),
                    "ms_per_step": round(1000 * median, 1),
                    "tokens_per_s": round(batch_size * seq_len / median, 1),
                    "speedup_vs_full": round(full_s / median, 3),
                    "controller_ms": round(1000 * update_s, 1),
                    "controller_share": round(update_s / (interval * median + update_s), 4),
                }
            )
            if on_row is not None:
                on_row(rows[-1])
    return {
        "benchmark": "training",
        "model": {"n_layer": n_layer, "d_model": d_model, "n_head": n_head, "d_ff": d_ff},
        "batch_size": batch_size,
        "steps": steps,
        "warmup": warmup,
        "threads": torch.get_num_threads(),
        "backend": backend,
        "feature_rows": feature_rows,
        "device": str(dev),
        "torch": torch.__version__,
        "rows": rows,
    }


COLUMNS = (
    "seq_len",
    "plan",
    "controller_share",
    "causal_coverage",
    "executed_ratio",
    "ms_per_step",
    "tokens_per_s",
    "speedup_vs_full",
)


def table_head(model: dict[str, int], batch_size: int, threads: int, backend: str,
               steps: int, warmup: int) -> str:  # fmt: skip
    title = (
        f"training throughput: {model}, batch {batch_size}, {threads} threads, backend "
        f"{backend}, median of {steps} steps after {warmup} warm-up"
    )
    return title + "\n" + "  ".join(f"{c:>15}" for c in COLUMNS)


def table_row(row: dict[str, Any]) -> str:
    return "  ".join(f"{row[c]!s:>15}" for c in COLUMNS)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aah bench training",
        description="Training tokens/s of full vs fixed T/4 vs each policy's plan, interleaved.",
    )
    flags.add_seq_lens(p, [1024, 4096])
    flags.add_batch_size(p, "sequences per step (default 2)", default=2)
    p.add_argument("--steps", type=int, default=3, help="timed steps per plan (median)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per plan first")
    flags.add_threads(p)
    p.add_argument("--backend", default="auto", help="attention backend (default auto)")
    p.add_argument(
        "--feature-rows", type=int, default=0, metavar="N",
        help="the AAH-v3 policies estimate their attention features from N sampled rows "
        "(controller.feature_rows; default 0: every row, exact)",
    )  # fmt: skip
    p.add_argument("--n-layer", type=int, default=4, help="model layers (default 4)")
    p.add_argument("--d-model", type=int, default=256, help="model width (default 256)")
    p.add_argument("--n-head", type=int, default=8, help="attention heads (default 8)")
    p.add_argument("--d-ff", type=int, default=0, help="MLP width (default 0: 4 x d-model)")
    p.add_argument(
        "--policies", default=",".join(POLICIES), metavar="P,P,...",
        help=f"controller policies whose plans to time (default {','.join(POLICIES)})",
    )  # fmt: skip
    flags.add_device(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Print the table row by row as each finishes, then one JSON line; exit 2 with a
    message on bad arguments."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        seq_lens = flags.int_list(args.seq_lens, minimum=8)
        flags.check_batch_size(args.batch_size)
        flags.check_threads(args.threads)
        if args.feature_rows < 0:
            raise ValueError(f"--feature-rows must be >= 0, got {args.feature_rows}")
        policies = tuple(name.strip() for name in args.policies.split(",") if name.strip())
        unknown = [name for name in policies if name not in POLICIES]
        if not policies or unknown:
            raise ValueError(f"--policies must be a comma list of {', '.join(POLICIES)}, "
                             f"got {args.policies!r}")  # fmt: skip
        model = {"n_layer": args.n_layer, "d_model": args.d_model, "n_head": args.n_head,
                 "d_ff": args.d_ff}  # fmt: skip
        GPTConfig(**model, n_kv_head=args.n_head).validate()  # the model's own rules
        if args.steps < 1 or args.warmup < 0:
            raise ValueError(f"--steps must be >= 1 and --warmup >= 0, got {args.steps}, "
                             f"{args.warmup}")  # fmt: skip
    except ValueError as err:
        print(f"aah bench training: error: {err}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    print(table_head(model, args.batch_size, torch.get_num_threads(), args.backend,
                     args.steps, args.warmup), flush=True)  # fmt: skip
    result = bench_training(
        seq_lens, batch_size=args.batch_size, steps=args.steps, warmup=args.warmup,
        threads=args.threads, backend=args.backend, device=args.device,
        feature_rows=args.feature_rows, policies=policies,
        on_row=lambda row: print(table_row(row), flush=True),
        **model,
    )  # fmt: skip
    print(json.dumps(result))
    return 0
