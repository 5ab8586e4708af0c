"""`aah posthoc RUN [RUN ...]`: per-head plans imposed on trained full-attention runs at
matched causal coverage, scored against full attention (aah.posthoc.analysis)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aah.cli import flags

EPILOG = """\
Each RUN is a finished `aah train` run (best: policy full, one per seed). Writes
OUT/posthoc.json (every run, plan and score), OUT/posthoc.md (Δ bpb per policy and coverage,
and on a generated task recall accuracy overall and in the farthest distance bucket; mean and
95% CI over runs) and OUT/posthoc.png. Each run's result is stored in OUT/runs/ as soon as it
is done (an interrupted command resumes there when run again with the same settings), and
each imposed plan in OUT/plans/<run>/<policy>-<cap>.json, loadable by any run with
--controller.policy static --controller.static_plan FILE. Example:
  aah posthoc results/screening/full-s0 results/screening/full-s1 --out results/posthoc
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from aah.posthoc.plans import POLICIES

    p.add_argument("runs", metavar="RUN", nargs="+", help="trained run directories")
    p.add_argument(
        "--coverages", default="0.1,0.2,0.3,0.5", metavar="C,C,...",
        help="causal coverage caps (default 0.1,0.2,0.3,0.5)",
    )  # fmt: skip
    p.add_argument(
        "--policies", default=",".join(POLICIES), metavar="P,P,...",
        help=f"plans to impose (default all: {', '.join(POLICIES)})",
    )  # fmt: skip
    p.add_argument(
        "--windows", default=None, metavar="W,W,...",
        help="candidate windows (default: powers of two from 1 up to T)",
    )  # fmt: skip
    p.add_argument(
        "--eval-windows", type=int, default=128, metavar="N",
        help="evaluation sequences of length T, evenly spread over the validation split",
    )  # fmt: skip
    p.add_argument("--batch-size", type=int, default=8, metavar="B", help="eval batch size")
    flags.add_threads(p)
    p.add_argument("--out", default="posthoc", metavar="DIR", help="output folder")
    p.add_argument("--json", action="store_true", help="last stdout line: the summary as JSON")


def _floats(text: str, name: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as err:
        raise ValueError(f"--{name}: expected a comma list of numbers, got {text!r}") from err


def run(args: argparse.Namespace, extra: list[str]) -> int:
    if extra:
        raise ValueError(f"unrecognized arguments: {' '.join(extra)}")
    import torch

    from aah import records
    from aah.posthoc.analysis import PosthocConfig, run_posthoc
    from aah.posthoc.report import markdown, plot, summarize
    from aah.posthoc.store import load_finished, save_finished

    flags.check_threads(args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)
    windows = (
        None if args.windows is None else tuple(int(w) for w in _floats(args.windows, "windows"))
    )
    cfg = PosthocConfig(
        coverages=_floats(args.coverages, "coverages"),
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        windows=windows,
        eval_windows=args.eval_windows,
        batch_size=args.batch_size,
    )
    cfg.validate()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for run_dir in args.runs:  # each finished run is stored at once: a rerun resumes
        result = load_finished(out, run_dir, cfg)
        if result is None:
            result = run_posthoc(run_dir, cfg, progress=print)
            save_finished(out, result, cfg)
        else:
            print(f"{run_dir}: stored result under the same config, reused")
        results.append(result)
    summary = summarize(results)
    payload = {
        "config": {**cfg.__dict__},
        "runs": [
            {"run": r.run, "full_bpb": r.full_bpb, "full": r.full, "rows": r.rows} for r in results
        ],
        "summary": summary,
    }
    records.write_text_atomic(out / "posthoc.json", json.dumps(payload, indent=1))
    table = markdown(summary, results)
    records.write_text_atomic(out / "posthoc.md", table)
    try:
        plot(summary, out / "posthoc.png")
    except ValueError as err:  # no matplotlib: the table and JSON still stand
        print(f"no plot: {err}")
    print(table)
    if args.json:
        print(json.dumps(summary))
    return 0
