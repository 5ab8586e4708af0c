"""Post-hoc results over runs: Δ bpb per (policy, coverage cap) with 95% CIs, a table, a plot."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from aah.eval.posthoc import RunResult
from aah.report import stats


def summarize(results: list[RunResult]) -> list[dict[str, Any]]:
    """One row per (policy, cap): runs, mean coverage, mean Δ bpb with its 95% CI and sd."""
    groups: dict[tuple[str, float | None], list[dict]] = {}
    for result in results:
        for row in result.rows:
            groups.setdefault((row["policy"], row["cap"]), []).append(row)
    out = []
    for (policy, cap), rows in groups.items():
        e = stats.estimate([r["delta_bpb"] for r in rows])
        out.append({
            "policy": policy, "cap": cap, "n": e.n,
            "coverage": stats.mean([r["coverage"] for r in rows]),
            "delta_bpb": e.mean, "ci": list(e.ci), "sd": e.sd,
        })  # fmt: skip
    return out


def markdown(summary: list[dict[str, Any]], full_bpb: list[float]) -> str:
    lines = [
        f"Full attention: {stats.mean(full_bpb):.4f} bits/byte (mean of {len(full_bpb)} runs).",
        "",
        "| policy | coverage cap | coverage | runs | Δ bpb vs full (mean) | 95% CI |",
        "|---|---|---|---|---|---|",
    ]
    for row in sorted(summary, key=lambda r: (r["cap"] is None, r["cap"] or 0, r["delta_bpb"])):
        cap = "—" if row["cap"] is None else f"{row['cap']:.2f}"
        lo, hi = row["ci"]
        ci = "n/a" if math.isnan(lo) else f"[{lo:+.4f}, {hi:+.4f}]"
        lines.append(
            f"| `{row['policy']}` | {cap} | {row['coverage']:.3f} | {row['n']} | "
            f"{row['delta_bpb']:+.4f} | {ci} |"
        )
    return "\n".join(lines) + "\n"


def plot(summary: list[dict[str, Any]], path: Path) -> Path:
    """Δ bpb against coverage, one line per policy (error bars: 95% CI over runs)."""
    from aah.report.plots import _pyplot, _save

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy in dict.fromkeys(r["policy"] for r in summary):
        rows = sorted((r for r in summary if r["policy"] == policy), key=lambda r: r["coverage"])
        xs = [r["coverage"] for r in rows]
        ys = [r["delta_bpb"] for r in rows]
        low = [0.0 if math.isnan(r["ci"][0]) else r["delta_bpb"] - r["ci"][0] for r in rows]
        high = [0.0 if math.isnan(r["ci"][1]) else r["ci"][1] - r["delta_bpb"] for r in rows]
        err = [low, high]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=policy)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("causal coverage (share of the causal attention pairs kept)")
    ax.set_ylabel("Δ bits/byte vs full attention")
    ax.set_title("Post-hoc allocation at matched coverage")
    ax.legend(fontsize=8, loc="upper right")
    return _save(fig, path)
