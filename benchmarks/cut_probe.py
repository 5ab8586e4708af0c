"""Seconds per loss-ablation measurement: CutProbe (reruns only what a cut changes) against
one whole forward per cut, interleaved A B A B in one run, on an untrained model (the cost
does not depend on the weights). Default shape: the text suite's model and calibration set.

    python benchmarks/cut_probe.py --threads 1
    python benchmarks/cut_probe.py --seq-len 256 --batch-size 32   # the recall suite's shape
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from aah.bench.timing import interleaved_medians
from aah.controller import ControllerConfig, make_policy
from aah.controller.ablation import cut_costs
from aah.eval.cut_probe import CutProbe
from aah.model import GPT, GPTConfig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--windows", type=int, default=16, help="calibration sequences")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per route")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = GPTConfig(
        n_layer=args.n_layer, n_head=args.n_head, n_kv_head=args.n_head,
        d_model=args.d_model, max_seq_len=args.seq_len,
    )  # fmt: skip
    model = GPT(cfg)
    candidates = make_policy(
        ControllerConfig(policy="loss-ablation"), n_layer=cfg.n_layer, n_head=cfg.n_head,
        n_kv_head=cfg.n_kv_head, seq_len=cfg.max_seq_len,
    ).windows  # fmt: skip
    windows = torch.randint(0, 256, (args.windows, args.seq_len + 1))
    probe = CutProbe(model, windows, args.batch_size)
    dims = (cfg.n_layer, cfg.n_head, cfg.max_seq_len, candidates)
    routes = {
        "cut-probe": lambda: cut_costs(probe, *dims),
        "whole-forward": lambda: cut_costs(lambda plan: probe(plan), *dims),  # a plain callable
    }
    costs: dict = {}  # each route's last answer, to compare them
    median = interleaved_medians(routes, reps=args.reps, answers=costs)  # after 1 untimed round
    result = {
        "benchmark": "cut_probe",
        "model": {"n_layer": cfg.n_layer, "n_head": cfg.n_head, "d_model": cfg.d_model},
        "seq_len": cfg.max_seq_len,
        "calibration_windows": args.windows,
        "batch_size": args.batch_size,
        "candidates": list(candidates),
        "threads": torch.get_num_threads(),
        "reps": args.reps,
        "median_s": {name: round(s, 3) for name, s in median.items()},
        "speedup": round(median["whole-forward"] / median["cut-probe"], 2),
        "max_abs_cost_diff": float(np.abs(costs["cut-probe"] - costs["whole-forward"]).max()),
        "nonzero_costs": int((costs["whole-forward"] > 0).sum()),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
