"""Post-hoc results over runs: per (policy, coverage cap) the quality kept against full
attention, as a table and a plot. Bits/byte: mean and Student t 95% CI over runs. Accuracies
(bounded, often bimodal over runs, where t does not hold): mean and the range over runs, and
for a paired accuracy difference the exact sign-flip test (at 5 runs its smallest two-sided p
is 0.0625, and its 95% interval is every possible value).

On text the measure is Δ bits/byte. On a generated task it is also the recall accuracy,
overall and in the farthest distance bucket (the answers only long windows can reach).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from aah.posthoc.analysis import RunResult
from aah.posthoc.plans import SHUFFLED_SUFFIX
from aah.report import stats


def far_bucket(result: RunResult) -> str | None:
    """Label of the farthest distance bucket that has answers, or None on text."""
    by_distance = result.full.get("acc_by_distance") or {}
    labels = [label for label, acc in by_distance.items() if acc is not None]
    return labels[-1] if labels else None


def _estimate(values: list[float], bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    """Mean, 95% CI and sd: Student t; for a bounded quantity (accuracy, `bounds` given) the
    sign-flip interval within `bounds` (the whole of `bounds` at 5 runs or fewer), its p
    against 0, and the range over runs."""
    if bounds is None:
        e = stats.estimate(values)
        return {"mean": e.mean, "ci": list(e.ci), "sd": e.sd}
    e = stats.sign_flip_estimate(values, bounds=bounds)
    return {"mean": e.mean, "ci": list(e.ci), "sd": e.sd, "p": e.p,
            "range": [min(values), max(values)]}  # fmt: skip


def summarize(results: list[RunResult]) -> list[dict[str, Any]]:
    """One row per (policy, cap): runs, mean coverage, Δ bpb and (on a task) accuracy and
    far-bucket accuracy, each as {"mean", "ci", "sd"} over runs."""
    far = far_bucket(results[0]) if results else None
    groups: dict[tuple[str, float | None], list[dict]] = {}
    for result in results:
        for row in result.rows:
            groups.setdefault((row["policy"], row["cap"]), []).append(row)
    out = []
    for (policy, cap), rows in groups.items():
        delta = _estimate([r["delta_bpb"] for r in rows])
        entry = {
            "policy": policy, "cap": cap, "n": len(rows),
            "coverage": stats.mean([r["coverage"] for r in rows]),
            "delta_bpb": delta["mean"], "ci": delta["ci"], "sd": delta["sd"],
        }  # fmt: skip
        if all(r.get("acc") is not None for r in rows):
            entry["acc"] = _estimate([r["acc"] for r in rows], (0.0, 1.0))
            if far is not None:
                entry["far_bucket"] = far
                entry["far_acc"] = _estimate([r["acc_by_distance"][far] for r in rows], (0.0, 1.0))
        out.append(entry)
    return out


def twins(results: list[RunResult]) -> list[dict[str, Any]]:
    """Each plan against its `-shuffled` twin (the same windows per layer on other heads),
    paired on run: Δ bpb = plan − twin, with the share of layers whose heads held more than one
    window (only there can the permutation change the plan). On a generated task, also the
    paired difference in accuracy at the farthest distance bucket ("far_acc")."""
    far = far_bucket(results[0]) if results else None
    pairs: dict[tuple[str, float | None], list[tuple[dict, dict]]] = {}
    for result in results:
        rows = {(r["policy"], r["cap"]): r for r in result.rows}
        for (policy, cap), row in rows.items():
            twin = rows.get((policy + SHUFFLED_SUFFIX, cap))
            if twin is not None:
                pairs.setdefault((policy, cap), []).append((row, twin))
    out = []
    for (policy, cap), matched in pairs.items():
        delta = _estimate([a["delta_bpb"] - b["delta_bpb"] for a, b in matched])
        layers = [len(set(row)) > 1 for a, _ in matched for row in a["windows"]]
        entry = {
            "policy": policy, "twin": policy + SHUFFLED_SUFFIX, "cap": cap, "n": len(matched),
            "delta_bpb": delta["mean"], "ci": delta["ci"],
            "lower": sum(a["delta_bpb"] < b["delta_bpb"] for a, b in matched),
            "mixed_layers": sum(layers) / len(layers),
        }  # fmt: skip
        if far is not None and all(a.get("acc_by_distance") for a, _ in matched):
            diffs = [a["acc_by_distance"][far] - b["acc_by_distance"][far] for a, b in matched]
            entry["far_bucket"], entry["far_acc"] = far, _estimate(diffs, (-1.0, 1.0))
            entry["far_acc"]["higher"] = sum(d > 0 for d in diffs)
        out.append(entry)
    return sorted(out, key=lambda r: (r["cap"] is None, r["cap"] or 0, r["policy"]))


def _twin_lines(pairs: list[dict[str, Any]]) -> list[str]:
    if not pairs:
        return []
    far = pairs[0].get("far_bucket") if all("far_acc" in r for r in pairs) else None
    header = (
        "| plan | twin | coverage cap | runs | Δ bpb (mean) | 95% CI | runs lower | mixed layers |"
    )
    if far:
        header += f" Δ accuracy at {far} | sign-flip p | runs higher |"
    lines = [
        "",
        "Each plan against its shuffled twin, paired on run (Δ bpb = plan − twin; negative: the "
        "plan's choice of heads within each layer beats random heads of the layer given the "
        "same windows). Mixed layers: share of layers whose heads held more than one window; "
        "elsewhere the permutation leaves the plan as it is. Δ accuracy: the exact paired "
        "sign-flip test over runs (two-sided; at 5 runs its smallest p is 0.0625).",
        "",
        header,
        "|" + "---|" * (header.count("|") - 1),
    ]
    for row in pairs:
        cells = [
            f"`{row['policy']}`", f"`{row['twin']}`",
            "—" if row["cap"] is None else f"{row['cap']:.2f}", str(row["n"]),
            f"{row['delta_bpb']:+.4f}", _ci(row["ci"], "+.4f"),
            f"{row['lower']}/{row['n']}", f"{row['mixed_layers']:.0%}",
        ]  # fmt: skip
        if far:
            acc = row["far_acc"]
            cells += [f"{acc['mean']:+.3f}", _p(acc["p"]), f"{acc['higher']}/{row['n']}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _p(p: float) -> str:
    return "n/a" if math.isnan(p) else f"{p:.3g}"


def _range(r: list[float]) -> str:
    return f"{r[0]:.3f}-{r[1]:.3f}"


def _ci(ci: list[float], spec: str) -> str:
    lo, hi = ci
    return "n/a" if math.isnan(lo) else f"[{lo:{spec}}, {hi:{spec}}]"


def markdown(summary: list[dict[str, Any]], results: list[RunResult]) -> str:
    """The table of `summarize`, preceded by full attention's own scores."""
    full_bpb = [r.full_bpb for r in results]
    lines = [f"Full attention: {stats.mean(full_bpb):.4f} bits/byte (mean of {len(results)} runs)."]
    task = bool(summary) and all("acc" in row for row in summary)
    far = summary[0].get("far_bucket") if task else None
    if task:
        accs = [float(r.full["acc"]) for r in results]
        text = f"Full attention's recall accuracy: {stats.mean(accs):.3f} overall"
        if far is not None:
            fars = [float(r.full["acc_by_distance"][far]) for r in results]
            text += f", {stats.mean(fars):.3f} at distances {far}"
        lines[0] += " " + text + "."
    header = "| policy | coverage cap | coverage | runs | Δ bpb vs full (mean) | 95% CI |"
    if task:
        header += " accuracy | range over runs |"
        header += f" accuracy at {far} | range over runs |" if far else ""
    lines += ["", header, "|" + "---|" * (header.count("|") - 1)]
    for row in sorted(summary, key=lambda r: (r["cap"] is None, r["cap"] or 0, r["delta_bpb"])):
        cap = "—" if row["cap"] is None else f"{row['cap']:.2f}"
        cells = [
            f"`{row['policy']}`", cap, f"{row['coverage']:.3f}", str(row["n"]),
            f"{row['delta_bpb']:+.4f}", _ci(row["ci"], "+.4f"),
        ]  # fmt: skip
        if task:
            cells += [f"{row['acc']['mean']:.3f}", _range(row["acc"]["range"])]
            if far:
                cells += [f"{row['far_acc']['mean']:.3f}", _range(row["far_acc"]["range"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Δ bpb = bits/byte under the plan − under full attention, on the same run and bytes; "
        "95% CI: Student t over runs (one run per seed). Accuracies: mean and range over runs "
        "(no t interval: bounded and often bimodal). Coverage: share of the causal (query, key) "
        "pairs the plan keeps.",
    ]
    if task:
        lines.append(
            "Accuracy: argmax prediction at the answer bytes, counted where the source lies in "
            "the same evaluation window."
        )
    lines += _twin_lines(twins(results))
    return "\n".join(lines) + "\n"


def _panel(ax: Any, summary: list[dict[str, Any]], value: Any, ylabel: str) -> None:
    for policy in dict.fromkeys(r["policy"] for r in summary):
        rows = sorted((r for r in summary if r["policy"] == policy), key=lambda r: r["coverage"])
        xs = [r["coverage"] for r in rows]
        ys, lo, hi = [], [], []
        for r in rows:
            mean, ci = value(r)
            ys.append(mean)
            lo.append(0.0 if math.isnan(ci[0]) else mean - ci[0])
            hi.append(0.0 if math.isnan(ci[1]) else ci[1] - mean)
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=policy)
    ax.set_xlabel("causal coverage (share of the causal attention pairs kept)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def plot(summary: list[dict[str, Any]], path: Path) -> Path:
    """Δ bpb (and, on a task, far-bucket accuracy) against coverage, one line per policy;
    error bars: 95% CI over runs for Δ bpb, the range over runs for accuracy."""
    from aah.report.plots import _pyplot, _save

    plt = _pyplot()
    far = summary[0].get("far_bucket") if summary else None
    task = far is not None and all("far_acc" in r for r in summary)
    fig, axes = plt.subplots(1, 2 if task else 1, figsize=(12 if task else 7, 4.5), squeeze=False)
    _panel(axes[0][0], summary, lambda r: (r["delta_bpb"], r["ci"]), "Δ bits/byte vs full")
    axes[0][0].axhline(0.0, color="grey", lw=0.8)
    if task:
        _panel(
            axes[0][1], summary, lambda r: (r["far_acc"]["mean"], r["far_acc"]["range"]),
            f"recall accuracy at distances {far}",
        )  # fmt: skip
    axes[0][-1].legend(fontsize=8, loc="best")
    title = "Post-hoc allocation at matched coverage (Δ bpb: 95% CI over runs"
    fig.suptitle(title + ("; accuracy: range over runs)" if task else ")"))
    return _save(fig, path)
