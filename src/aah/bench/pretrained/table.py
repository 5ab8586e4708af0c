"""The comparison table: every method's held-out loss against uniform + sinks at its KV budget.

Differences are paired over held-out blocks (the same text under both plans): mean, 95%
t-interval over blocks, and a Holm-adjusted p-value. The Holm family is declared here, before
any number: every (method, KV fraction) against `uniform` at the same fraction, `full`
included, one family per run. The difference from `full` is given beside it with its
interval (descriptive, not tested).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aah.report.comparisons import holm
from aah.report.stats import Estimate, estimate

Losses = Mapping[tuple[str, float], Sequence[float]]  # (method, KV fraction) -> per block


@dataclass(frozen=True)
class Row:
    method: str
    kv_target: float  # the budget's fraction of the full cache
    kv_fraction: float  # what the plan holds (<= kv_target; 1 for full)
    loss: float
    vs_full: Estimate
    vs_uniform: Estimate | None  # None for uniform itself
    holm_p: float | None
    needle: float | None  # share of needles retrieved, when the grid ran


def _diff(a: Sequence[float], b: Sequence[float]) -> Estimate:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} and {len(b)} block losses cannot be paired")
    return estimate([x - y for x, y in zip(a, b, strict=True)])


def rows(
    losses: Losses,
    full: Sequence[float],
    kv_held: Mapping[tuple[str, float], float],
    needles: Mapping[tuple[str, float], float] | None = None,
) -> list[Row]:
    """One row per (method, KV fraction) in `losses`, in their order; `full` is the full
    model's per-block losses, `kv_held` each plan's KV fraction."""
    needles = needles or {}
    tested = [k for k in losses if k[0] != "uniform"]
    missing = [f for _, f in tested if ("uniform", f) not in losses]
    if missing:
        raise ValueError(f"no uniform baseline at KV fraction(s) {sorted(set(missing))}")
    vs_uniform = {k: _diff(losses[k], losses[("uniform", k[1])]) for k in tested}
    adjusted = dict(zip(tested, holm([vs_uniform[k].p for k in tested]), strict=True))
    return [
        Row(
            method=k[0], kv_target=k[1], kv_fraction=kv_held[k],
            loss=sum(v) / len(v), vs_full=_diff(v, full),
            vs_uniform=vs_uniform.get(k), holm_p=adjusted.get(k), needle=needles.get(k),
        )
        for k, v in losses.items()
    ]  # fmt: skip


def _ci(e: Estimate | None) -> str:
    if e is None:
        return ""
    return f"{e.mean:+.4f} [{e.ci[0]:+.4f}, {e.ci[1]:+.4f}]"


def _p(p: float | None) -> str:
    if p is None:
        return ""
    return f"{p:.2g}" if p >= 1e-4 else "< 1e-4"


def markdown(table: Sequence[Row], full_loss: float, full_needle: float | None) -> str:
    """The table as Markdown: one block per KV fraction, the full model's line first."""
    head = (
        "| KV budget | method | KV held | loss (nats) | vs full [95% CI] | vs uniform [95% CI] "
        "| Holm p | needles |\n|---|---|---|---|---|---|---|---|\n"
    )
    needle = "" if full_needle is None else f"{full_needle:.2f}"
    lines = [f"| 1.0 | full | 1.000 | {full_loss:.4f} | | | | {needle} |"]
    for r in table:
        acc = "" if r.needle is None else f"{r.needle:.2f}"
        lines.append(
            f"| {r.kv_target:.3g} | {r.method} | {r.kv_fraction:.3f} | {r.loss:.4f} | "
            f"{_ci(r.vs_full)} | {_ci(r.vs_uniform)} | {_p(r.holm_p)} | {acc} |"
        )
    return head + "\n".join(lines) + "\n"
