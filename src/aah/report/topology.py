"""Which hierarchy topologies each regime's controller built, from the cells' plans.jsonl.

A topology is the number of groups per level of one layer, e.g. [2, 2, 2, 2] (four levels
of two groups). The table counts, per regime, the topologies of every layer in the last plan
record of every seed, and says whether two regimes chose different windows anywhere.
"""

from __future__ import annotations

from collections import Counter

from aah.report.suite_data import Suite


def _topologies(plan: dict) -> list[tuple[int, ...]]:
    return [tuple(len(level) for level in layer) for layer in plan.get("groups") or []]


def topology_counts(suite: Suite, regime: str) -> Counter:
    """Topology -> how many (seed, layer) pairs ended with it."""
    counts: Counter = Counter()
    for run in suite.runs(regime):
        decided = [p for p in run.plans if p.get("decisions") is not None]
        if decided:
            counts.update(_topologies(decided[-1]))
    return counts


def topology_section(suite: Suite) -> list[str]:
    rows = []
    for regime in suite.regimes:
        counts = topology_counts(suite, regime)
        if counts:
            text = ", ".join(
                f"{list(t)} × {n}" for t, n in sorted(counts.items(), key=lambda kv: -kv[1])
            )
            rows.append(f"- `{regime}`: {text}")
    if not rows:
        return []
    lines = [
        "### Hierarchy topologies",
        "",
        "Groups per level of each layer at the last control update (layer count over seeds):",
        "",
        *rows,
    ]
    same = _same_windows(suite, "aah-v3-shallow-freeze", "aah-v3-deep-reuse")
    if same is not None:
        lines += [
            "",
            "`aah-v3-shallow-freeze` and `aah-v3-deep-reuse` "
            + ("chose the same windows at every update on every common seed." if same else
               "chose different windows on at least one seed."),
        ]  # fmt: skip
    return [*lines, ""]


def _same_windows(suite: Suite, a: str, b: str) -> bool | None:
    runs_a = {r.seed: r for r in suite.runs(a)}
    runs_b = {r.seed: r for r in suite.runs(b)}
    common = sorted(set(runs_a) & set(runs_b))
    if not common:
        return None
    return all(
        [p.get("windows") for p in runs_a[s].plans] == [p.get("windows") for p in runs_b[s].plans]
        for s in common
    )
