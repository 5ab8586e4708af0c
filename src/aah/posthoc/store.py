"""What `aah posthoc` keeps on disk as it goes: one JSON per finished run, so an interrupted
multi-run analysis resumes where it stopped, and each imposed plan as a plan file.

OUT/runs/<run name>-<hash of its path>.json holds the run's `RunResult` and the config it
was scored under; it is reused only when that config equals the current one.
OUT/plans/<run name>/<policy>[-<cap>].json is a plan file (`aah.plan.WindowPlan`) that
any run can load, e.g. `--controller.policy static --controller.static_plan FILE`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from aah.atomic import write_text_atomic
from aah.plan import WindowPlan
from aah.posthoc.analysis import PosthocConfig, RunResult


def _config(cfg: PosthocConfig) -> dict:
    return json.loads(json.dumps(asdict(cfg)))  # tuples -> lists, as they read back


def run_file(out: Path, run: str) -> Path:
    digest = hashlib.sha1(str(Path(run).resolve()).encode()).hexdigest()[:8]
    return out / "runs" / f"{Path(run).name}-{digest}.json"


def load_finished(out: Path, run: str, cfg: PosthocConfig) -> RunResult | None:
    """The stored result of `run` under this very config, else None."""
    path = run_file(out, run)
    if not path.is_file():
        return None
    stored = json.loads(path.read_text(encoding="utf-8"))
    if stored.get("config") != _config(cfg) or stored.get("run") != run:
        return None
    return RunResult(stored["run"], stored["full"], stored["rows"])


def save_finished(out: Path, result: RunResult, cfg: PosthocConfig) -> None:
    """Store one run's result, and each plan it imposed as a plan file."""
    path = run_file(out, result.run)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"config": _config(cfg), "run": result.run, "full": result.full, "rows": result.rows}
    write_text_atomic(path, json.dumps(payload, indent=1))
    plans = out / "plans" / Path(result.run).name
    plans.mkdir(parents=True, exist_ok=True)
    for row in result.rows:
        name = row["policy"] if row["cap"] is None else f"{row['policy']}-{row['cap']:g}"
        meta = {"policy": row["policy"], "cap": row["cap"], "run": result.run}
        WindowPlan.of(row["windows"], **meta).save(plans / f"{name}.json")
