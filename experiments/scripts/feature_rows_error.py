"""How far the AAH-v3 attention features from sampled rows (`controller.feature_rows`) are
from the exact ones on trained runs, and whether the first decision changes.

For each run: 8 validation windows spread over the split, one forward under full attention;
per head the relative error of the entropy and output-norm features from N sampled rows
against every row; then aah-v3-full-adaptive's first decision from each, window by window.

    python -m experiments.scripts.feature_rows_error results/text/full-s0 results/text/full-s1
"""

from __future__ import annotations

import argparse
import json

import torch

from aah.controller import ControllerConfig, make_policy
from aah.controller.head_stats import attention_stats, sample_rows
from aah.controller.options import AdaptiveOptions
from aah.data.dataset import load_tokens
from aah.data.loader import spread_windows
from aah.training.load import load_run


def first_decision(cfg, acts, feature_rows: int) -> list[list[int]]:  # type: ignore[no-untyped-def]
    control = ControllerConfig(
        policy="aah-v3-full-adaptive", warmup_steps=0, feature_rows=feature_rows
    )
    policy = make_policy(
        control, n_layer=cfg.model.n_layer, n_head=cfg.model.n_head,
        n_kv_head=cfg.model.n_kv_head, seq_len=cfg.seq_len,
    )  # fmt: skip
    policy.update(0, acts)
    interval = control.options_as(AdaptiveOptions).interval
    policy.update(interval - 1, acts)  # the features' pass
    plan = policy.update(interval, acts)
    assert plan is not None
    return plan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="trained run directories (with a checkpoint)")
    parser.add_argument("--rows", default="64,256", help="comma list of sampled-row counts")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    counts = [int(n) for n in args.rows.split(",")]
    for run in args.runs:
        model, cfg, _ = load_run(run)
        seq_len = cfg.seq_len
        windows = spread_windows(load_tokens(cfg.data, seq_len=seq_len).val, seq_len, 8)
        full = [[seq_len] * cfg.model.n_head for _ in range(cfg.model.n_layer)]
        model.set_window_plan(full)
        with torch.no_grad(), model.capturing() as acts:
            model(windows[:, :-1])
        exact_plan = first_decision(cfg, acts, 0)
        result: dict = {"run": run, "seq_len": seq_len}
        for n in counts:
            errors = []
            for q, k, v, out in acts:
                exact = attention_stats(q, k, v, full[0], out=out)
                rows = sample_rows(seq_len, n, 0)
                estimate = attention_stats(q, k, v, full[0], out=out, rows=rows)
                errors.append(((estimate - exact).abs() / exact.abs().clamp_min(1e-12))[:, :2])
            err = torch.cat(errors)
            plan = first_decision(cfg, acts, n)
            pairs = zip(plan, exact_plan, strict=True)
            same = sum(a == b for x, y in pairs for a, b in zip(x, y, strict=True))
            result[f"rows_{n}"] = {
                "entropy_rel_err_median": round(float(err[:, 0].median()), 4),
                "entropy_rel_err_max": round(float(err[:, 0].max()), 4),
                "norm_rel_err_median": round(float(err[:, 1].median()), 4),
                "norm_rel_err_max": round(float(err[:, 1].max()), 4),
                "same_windows": f"{same}/{sum(len(r) for r in plan)}",
            }
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
