"""Does the suite's `full` model use the context that windows remove? The report's answer,
from the `cut_windows.json` that `aah eval RUN --cut-windows ...` leaves in the full cells.

A comparison of window policies can show an allocation effect only if cutting every head
of the trained full model to a window costs quality. The gate asked before reading a suite:
cutting every head to w = GATE_WINDOW must cost at least GATE_BPB bits/byte; on a generated
task, cutting every head below the farthest distance bucket must lose at least GATE_ACC_DROP of
that bucket's accuracy.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from aah.report import stats
from aah.report.markdown import ci_text, fmt, table
from aah.report.suite_data import BASELINE, Suite

CUT_FILE = "cut_windows.json"
GATE_WINDOW = 128
GATE_BPB = 0.05
GATE_ACC_DROP = 0.25  # generated tasks: farthest-bucket accuracy lost when cut below it


def _curves(suite: Suite) -> dict[int, list[dict]]:
    """seed -> the cut rows of each full cell that has them."""
    out = {}
    for run in suite.runs(BASELINE):
        path = run.path / CUT_FILE
        if path.exists():
            out[run.seed] = json.loads(path.read_text(encoding="utf-8"))
    return out


def _deltas(curves: dict[int, list[dict]], window: int, key: str) -> list[float]:
    """Per seed: the cut's value minus full attention's (same seed, same bytes)."""
    out = []
    for rows in curves.values():
        by_window = {r.get("window"): r for r in rows if r.get(key) is not None}
        full = next((r for r in rows if r.get("cut") == "full" and r.get(key) is not None), None)
        if window in by_window and full is not None:
            out.append(float(by_window[window][key]) - float(full[key]))
    return out


def _far(rows: list[dict]) -> str | None:
    by = next((r.get("val_acc_by_distance") for r in rows if r.get("val_acc_by_distance")), None)
    return list(by)[-1] if by else None


def context_use_section(suite: Suite) -> list[str]:
    """Markdown lines (a note on how to get them when no full cell has been cut)."""
    lines = ["### Context use of the full model", ""]
    curves = _curves(suite)
    if not curves:
        return [
            *lines,
            f"Not measured: run `aah eval RUN --cut-windows 32,64,{GATE_WINDOW}` on the `full` "
            "cells, then `aah report` again.",
            "",
        ]
    any_rows = next(iter(curves.values()))
    windows = sorted({int(r["window"]) for r in any_rows if r.get("cut") not in (None, "full")
                      and r.get("window") is not None})  # fmt: skip
    far = _far(any_rows)
    header = ["every head cut to", "seeds", "Δ bits/byte vs full", "95% CI"]
    if far:
        header += [f"accuracy at {far}", "95% CI"]
    rows = []
    for w in windows:
        e = stats.estimate(_deltas(curves, w, "val_bpb"))
        row = [str(w), str(e.n), fmt(e.mean, "+.4f"), ci_text(e.ci)]
        if far:
            accs = [
                float(r["val_acc_by_distance"][far])
                for rs in curves.values()
                for r in rs
                if r.get("window") == w and r.get("val_acc_by_distance")
            ]
            a = stats.estimate(accs)
            row += [fmt(a.mean, ".3f"), ci_text(a.ci, ".3f")]
        rows.append(row)
    lines += [
        "Every head of each seed's trained `full` model cut to w at test time "
        f"(`{CUT_FILE}` of the full cells, on the training loop's validation bytes):",
        "",
        *table(header, rows),
        "",
    ]
    lines += _task_gate(curves, far) if far else _text_gate(curves)
    return lines


@dataclass(frozen=True)
class Gate:
    """The gate's verdict over the seeds that measured it (what the report's sentence says).

    kind "bpb": the bits/byte every head cut to `window` costs (`ci` its 95% CI, `below` the
    seeds under `threshold`); kind "accuracy": the far bucket's accuracy lost (`ci` nan)."""

    kind: str
    window: int
    seeds: int
    mean: float
    ci: tuple[float, float]
    below: int
    threshold: float
    bucket: str | None = None

    @property
    def met(self) -> bool:
        return self.mean >= self.threshold

    @property
    def straddles(self) -> bool:
        """The CI reaches both sides of the threshold (never with one seed: nan bounds)."""
        return self.ci[0] < self.threshold <= self.ci[1]


def text_gate(curves: dict[int, list[dict]]) -> Gate | None:
    """The bits/byte gate from each seed's cut rows; None when no seed cut at GATE_WINDOW."""
    gate = _deltas(curves, GATE_WINDOW, "val_bpb")
    if not gate:
        return None
    est = stats.estimate(gate)
    below = sum(g < GATE_BPB for g in gate)
    return Gate("bpb", GATE_WINDOW, len(gate), est.mean, est.ci, below, GATE_BPB)


def task_gate(curves: dict[int, list[dict]], far: str) -> Gate | None:
    """On a generated task: the farthest bucket's accuracy with every head cut to the
    largest cut below the bucket, against full attention (same seed); None when unmeasured."""
    low = int(far.split("-")[0])
    drops = []
    for rows in curves.values():
        cuts = [r for r in rows if r.get("window") is not None and r.get("cut") != "full"]
        below = [r for r in cuts if int(r["window"]) <= low and r.get("val_acc_by_distance")]
        full = next((r for r in rows if r.get("cut") == "full"), None)
        if below and full is not None and full.get("val_acc_by_distance"):
            cut = max(below, key=lambda r: int(r["window"]))
            drops.append(
                (
                    int(cut["window"]),
                    full["val_acc_by_distance"][far] - cut["val_acc_by_distance"][far],
                )
            )
    if not drops:
        return None
    values = [d for _, d in drops]
    return Gate(
        "accuracy", drops[0][0], len(drops), stats.mean(values), (math.nan, math.nan),
        sum(d < GATE_ACC_DROP for d in values), GATE_ACC_DROP, far,
    )  # fmt: skip


def _text_gate(curves: dict[int, list[dict]]) -> list[str]:
    gate = text_gate(curves)
    if gate is None:
        return [f"Gate not measured: no cut at w = {GATE_WINDOW}.", ""]
    text = (
        f"Gate ({'met' if gate.met else 'not met'}): cutting every head to "
        f"w = {gate.window} costs {gate.mean:+.4f} bits/byte on average over {gate.seeds} "
        f"seeds; a suite can show allocation effects on bits/byte only if this is at least "
        f"{gate.threshold}."
    )
    if gate.straddles:
        low, high = gate.ci
        text += (
            f" Its 95% CI [{low:+.4f}, {high:+.4f}] reaches both sides of {gate.threshold} "
            f"({gate.below} of {gate.seeds} seeds below it)."
        )
    if not gate.met:
        text += (
            " The model uses little context beyond that window: differences between window "
            "policies here are optimisation noise, not context allocation."
        )
    return [text, ""]


def _task_gate(curves: dict[int, list[dict]], far: str) -> list[str]:
    gate = task_gate(curves, far)
    if gate is None:
        return [f"Gate not measured: no cut at or below {int(far.split('-')[0])}.", ""]
    return [
        f"Gate ({'met' if gate.met else 'not met'}): cutting every head to w = {gate.window} "
        f"lowers the accuracy at distances {far} by {gate.mean:.3f} on average over "
        f"{gate.seeds} seeds (a suite can show allocation effects only if this is at least "
        f"{gate.threshold}).",
        "",
    ]
