"""`aah plan`: window plans as plain data.

- `export RUN_DIR`: the plan in force in a run, as a plan file (`aah.plan.WindowPlan`);
- `search MODEL_DIR`: a plan for a Hugging Face model, one window per KV head, under a
  coverage or KV-byte budget, with optional attention sinks;
- `apply MODEL_DIR --plan FILE`: perplexity of a Hugging Face model with and without a plan
  (and its sinks), with the plan's coverage and KV bytes;
- `heal MODEL --plan FILE --out FILE`: a plan with a few learned parameters that bring the
  planned model back toward its full attention (`aah.hf.heal`).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    from aah.cli.hf import heal_cmd, plan_args

    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    export = actions.add_parser("export", help="print the plan in force in a run as JSON")
    export.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    search = actions.add_parser(
        "search",
        help="search a per-KV-head plan for a Hugging Face model (needs aah-attention[hf])",
    )
    plan_args.add_plan_search_arguments(search)
    apply = actions.add_parser(
        "apply", help="perplexity of a Hugging Face model with a plan (needs aah-attention[hf])"
    )
    plan_args.add_plan_apply_arguments(apply)
    heal = actions.add_parser(
        "heal",
        help="heal a Hugging Face model to its plan: learn a few parameters by distillation "
        "against its full attention (needs aah-attention[hf])",
    )
    heal_cmd.add_arguments(heal)


def plan_in_force(run_dir: Path) -> tuple[list[list[int]], dict[str, object]]:
    """The last checkpoint's plan, else the last plans.jsonl record (a run still starting)."""
    from aah import records

    if (run_dir / records.CHECKPOINT).exists():
        from aah.training.checkpoint import load_checkpoint

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
    if args.action in ("search", "apply", "heal"):
        from aah.cli.hf import heal_cmd, plan_args
        from aah.cli.hf.plan_checks import check_plan_arguments

        if args.action == "heal":
            run_action = heal_cmd.run
        else:
            check_plan_arguments(args)
            run_action = (
                plan_args.run_plan_search if args.action == "search" else plan_args.run_plan_apply
            )
        try:
            return run_action(args)
        except OSError as err:  # e.g. a hub name that cannot be fetched, a full disk
            raise ValueError((str(err).strip() or repr(err)).splitlines()[0]) from None
        except ImportError as err:  # a package the command needs, named with its install line
            raise ValueError(str(err).splitlines()[0]) from None
    from aah.plan import WindowPlan

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"run directory {str(run_dir)!r} does not exist")
    plan, extra_fields = plan_in_force(run_dir)
    print(WindowPlan.of(plan, **extra_fields).to_json())  # type: ignore[arg-type]
    return 0
