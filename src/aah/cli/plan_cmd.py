"""`aah plan export RUN_DIR`: the window plan in force, as JSON (aah.controller.plan_to_json)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("export",), help="export: print the plan in force as JSON")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")


def plan_in_force(run_dir: Path) -> tuple[list[list[int]], dict[str, object]]:
    """The last checkpoint's plan, else the last plans.jsonl record (a run still starting)."""
    from aah.eval import records

    if (run_dir / records.CHECKPOINT).exists():
        from aah.train.checkpoint import load_checkpoint

        payload = load_checkpoint(run_dir / records.CHECKPOINT)
        config = payload["config"]
        extra = {
            "step": payload["step"],
            "policy": config["controller"]["policy"],
            "seq_len": config["model"]["max_seq_len"],
        }
        return payload["plan"], extra
    plans = records.read_jsonl(run_dir / records.PLANS)
    if not plans:
        raise ValueError(
            f"{str(run_dir)!r} has neither checkpoints/last.pt nor plans.jsonl records"
        )
    last = plans[-1]
    return last["windows"], {"step": last.get("step"), "policy": last.get("policy")}


def run(args: argparse.Namespace, extra: list[str]) -> int:
    if extra:
        raise ValueError(f"unrecognized arguments: {' '.join(extra)}")
    from aah.controller.plan import plan_to_json

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"run directory {str(run_dir)!r} does not exist")
    plan, extra_fields = plan_in_force(run_dir)
    print(plan_to_json(plan, **extra_fields))
    return 0
