"""Replaying a finished run's plans: an exactly matched control for any controller regime.

`replay` puts the source run's logged plans (its plans.jsonl) in force at the steps the
source did, so a replay on the source's seed and config retrains the source run exactly:
the window decisions become a schedule known in advance, and nothing else changes.

`replay-shuffled` is the twin that asks whether the controller's choice of *which head*
gets which window matters: the same schedule with each layer's windows permuted across its
heads by one seeded permutation per layer, drawn once. Every layer holds the same windows
as the source at every step, so coverage, per-layer coverage and cost match exactly; only
the heads differ. (The `shuffle` twin runs its own controller on its own model instead, so
its coverage drifts from its regime's.)

`replay-scattered` asks the same of the controller's choice of *layers*: the same schedule
with all windows of a plan permuted across every head of every layer by one seeded
permutation, drawn once. The model's coverage and cost match the source's at every step;
how the context is split between layers does not.

Both twins are `replay` run by a `Shuffled` wrapper (shuffle.py; policies.py builds them).

A record of step s in plans.jsonl is the plan the source set after optimizer step s, in
force from step s + 1; the step-0 record is the plan of the first step.
"""

from __future__ import annotations

from pathlib import Path

from aah import records
from aah.controller.base import BasePolicy
from aah.controller.config import ControllerConfig
from aah.controller.options import ReplayOptions
from aah.controller.protocol import QKV
from aah.plan import Plan, check_plan


def load_schedule(run_dir: str, n_layer: int, n_head: int, seq_len: int) -> list[tuple[int, Plan]]:
    """(step, plan) of every plans.jsonl record of the finished run `run_dir`, checked
    against the model: ValueError naming the run and the first bad record."""
    path = Path(run_dir)
    where = f"controller.replay_from {run_dir!r}"
    if not (path / records.SUMMARY).exists():
        raise ValueError(
            f"{where} is not a finished run (no {records.SUMMARY}): a replay needs the whole "
            "plan sequence, so train the source run first"
        )
    source_t = records.read_json(path / records.SUMMARY).get("seq_len")
    if source_t is not None and source_t != seq_len:
        raise ValueError(f"{where} was trained at T = {source_t}, this run has T = {seq_len}")
    schedule: list[tuple[int, Plan]] = []
    for i, record in enumerate(records.read_jsonl(path / records.PLANS)):
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"{where}: plans.jsonl record {i} has step {step!r}")
        if schedule and step <= schedule[-1][0]:
            raise ValueError(
                f"{where}: plans.jsonl steps must increase, record {i} has step {step} "
                f"after {schedule[-1][0]}"
            )
        try:
            plan = check_plan(record.get("windows"), n_layer, n_head)
        except ValueError as err:
            raise ValueError(f"{where}: plans.jsonl record {i}: {err}") from err
        too_wide = [w for row in plan for w in row if w > seq_len]
        if too_wide:
            raise ValueError(
                f"{where}: plans.jsonl record {i} has window {too_wide[0]} > T = {seq_len} "
                "(the source was trained at another sequence length)"
            )
        schedule.append((step, plan))
    if not schedule or schedule[0][0] != 0:
        raise ValueError(f"{where}: plans.jsonl must start with the step-0 plan")
    return schedule


class ReplayPolicy(BasePolicy):
    """`replay`: the source's plans at the source's steps (see the module docstring)."""

    def __init__(self, cfg: ControllerConfig, **dims: int) -> None:
        schedule = load_schedule(
            str(cfg.options_as(ReplayOptions).replay_from),
            dims["n_layer"],
            dims["n_head"],
            dims["seq_len"],
        )
        self._schedule = dict(schedule)
        super().__init__(cfg.policy, cfg, plan=self._schedule[0], **dims)

    def wants_update(self, step: int) -> bool:
        return step in self._schedule and step > 0

    def wants_activations(self, step: int) -> bool:
        return False

    def update(self, step: int, qkv: QKV | None) -> Plan | None:
        self._plan = [list(row) for row in self._schedule[step]]
        return self.current_plan()
