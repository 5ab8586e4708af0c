"""The comparison table: every method's held-out loss against uniform + sinks at its KV budget.

Differences are paired over held-out blocks (the same text under both plans): mean, 95%
t-interval over blocks, and a Holm-adjusted p-value. The Holm family is declared here, before
any number: every (method, KV fraction) against `uniform` at the same fraction, `full` included,
one family per run; or only the comparisons a folder declared (`holm_across`'s `family`,
`--holm-family`), the other rows reported without a Holm p. The difference from `full` is given
beside it with its interval (descriptive, not tested). Needles are compared with full attention
needle by needle: how many full retrieves and the plan misses (lost), the reverse (gained), and
the exact two-sided sign test on those discordant needles (McNemar's exact test), unadjusted.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

from aah.report.comparisons import holm
from aah.report.stats import Estimate, estimate
from experiments.pretrained.clusters import clustered_estimate

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
    needles_lost: int | None = None  # retrieved by full attention, missed under the plan
    needles_gained: int | None = None  # missed by full attention, retrieved under the plan
    needles_p: float | None = None  # exact sign test over the discordant needles


def paired_difference(
    a: Sequence[float], b: Sequence[float], clusters: Sequence[Hashable] | None = None
) -> Estimate:
    """The paired difference a - b over blocks; with `clusters` (each block's file), over the
    files' mean differences (`clusters.clustered_estimate`)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} and {len(b)} block losses cannot be paired")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    return estimate(diffs) if clusters is None else clustered_estimate(diffs, clusters)


def needle_change(full: Sequence[bool], plan: Sequence[bool]) -> tuple[int, int, float]:
    """(lost, gained, p): needles full attention retrieves and the plan misses, the reverse,
    and the exact two-sided sign test over those discordant needles (1 when there are none)."""
    if len(full) != len(plan):
        raise ValueError(f"{len(full)} and {len(plan)} needles cannot be paired")
    lost = sum(bool(a) and not bool(b) for a, b in zip(full, plan, strict=True))
    gained = sum(bool(b) and not bool(a) for a, b in zip(full, plan, strict=True))
    return lost, gained, sign_test_p(lost, gained)


def sign_test_p(a: int, b: int) -> float:
    """The exact two-sided sign test of `a` discordant pairs one way and `b` the other (McNemar's
    exact test): twice the binomial(a + b, 1/2) tail at min(a, b), at most 1; 1 for none. Exact
    at any count (the sign-flip permutation test samples beyond 16 values)."""
    n = a + b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a, b) + 1))
    return min(1.0, 2 * tail / 2**n)


def rows(
    losses: Losses,
    full: Sequence[float],
    kv_held: Mapping[tuple[str, float], float],
    needles: Mapping[tuple[str, float], Sequence[bool]] | None = None,
    clusters: Sequence[Hashable] | None = None,
) -> list[Row]:
    """One row per (method, KV fraction) in `losses`, in their order; `full` is the full
    model's per-block losses, `kv_held` each plan's KV fraction, `needles` each plan's
    per-needle hits, full attention's under ("full", 1.0), `clusters` each block's file
    (intervals and tests over the files' means; None: over blocks). Holm runs over this
    table's comparisons; `holm_across` re-adjusts several tables as one family."""
    needles = needles or {}
    change = {
        k: needle_change(needles[("full", 1.0)], hits)
        for k, hits in needles.items()
        if k != ("full", 1.0)
    }
    tested = [k for k in losses if k[0] != "uniform"]
    missing = [f for _, f in tested if ("uniform", f) not in losses]
    if missing:
        raise ValueError(f"no uniform baseline at KV fraction(s) {sorted(set(missing))}")
    vs_uniform = {
        k: paired_difference(losses[k], losses[("uniform", k[1])], clusters) for k in tested
    }
    adjusted = dict(zip(tested, holm([vs_uniform[k].p for k in tested]), strict=True))
    return [
        Row(
            method=k[0], kv_target=k[1], kv_fraction=kv_held[k],
            loss=sum(v) / len(v), vs_full=paired_difference(v, full, clusters),
            vs_uniform=vs_uniform.get(k), holm_p=adjusted.get(k),
            needle=sum(needles[k]) / len(needles[k]) if k in needles else None,
            needles_lost=change[k][0] if k in change else None,
            needles_gained=change[k][1] if k in change else None,
            needles_p=change[k][2] if k in change else None,
        )
        for k, v in losses.items()
    ]  # fmt: skip


#: a declared comparison with uniform: (table, method, KV fraction); None matches any
Comparison = tuple[str, str | None, float | None]


def holm_across(
    tables: Mapping[str, Sequence[Row]], family: Sequence[Comparison] | None = None
) -> dict[str, list[Row]]:
    """The tables with one Holm family over their comparisons with `uniform`, in place of
    each table's own: every tested row of every table, or (`family`) the rows a declared
    comparison names, the others left without a Holm p (reported, not tested)."""
    tested = [(name, i) for name, rows_ in tables.items() for i, r in enumerate(rows_)
              if r.vs_uniform is not None
              and (family is None or any(declares(c, name, r) for c in family))]  # fmt: skip
    adjusted = holm([tables[name][i].vs_uniform.p for name, i in tested])  # type: ignore[union-attr]
    out = {name: [replace(r, holm_p=None) for r in rows_] for name, rows_ in tables.items()}
    for (name, i), p in zip(tested, adjusted, strict=True):
        out[name][i] = replace(out[name][i], holm_p=p)
    return out


def declares(comparison: Comparison, table: str, row: Row) -> bool:
    """Whether a declared comparison names this row of this table."""
    name, method, fraction = comparison
    return (name == table and method in (None, row.method)
            and (fraction is None or math.isclose(fraction, row.kv_target)))  # fmt: skip


def parse_family(spec: str) -> list[Comparison]:
    """`TABLE[:METHOD[@FRACTION]]`, comma separated (e.g. `pooled:output@0.3`): the declared
    comparisons with uniform; ValueError naming an entry that is not of that form."""
    out: list[Comparison] = []
    for entry in (e.strip() for e in spec.split(",")):
        name, colon, rest = entry.partition(":")
        method, at, fraction = rest.partition("@")
        try:
            value = float(fraction) if fraction else None
        except ValueError:
            value = math.nan
        malformed = not name or (colon and not method) or (at and not fraction)
        if malformed or (value is not None and not 0 < value < 1):
            raise ValueError(
                f"--holm-family entry {entry!r} is not TABLE[:METHOD[@FRACTION]] with a "
                "fraction in (0, 1)"
            )
        out.append((name, method or None, value))
    return out


def _ci(e: Estimate | None) -> str:
    if e is None:
        return ""
    return f"{e.mean:+.4f} [{e.ci[0]:+.4f}, {e.ci[1]:+.4f}]"


def _p(p: float | None) -> str:
    if p is None:
        return ""
    if math.isnan(p):  # one document: no interval, no test
        return "n/a"
    return f"{p:.2g}" if p >= 1e-4 else "< 1e-4"


def markdown(table: Sequence[Row], full_loss: float, full_needle: float | None) -> str:
    """The table as Markdown: one block per KV fraction, the full model's line first."""
    head = (
        "| KV budget | method | KV held | loss (nats) | vs full [95% CI] | vs uniform [95% CI] "
        "| Holm p | needles | needles vs full (lost / gained, p) |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    needle = "" if full_needle is None else f"{full_needle:.2f}"
    lines = [f"| 1.0 | full | 1.000 | {full_loss:.4f} | | | | {needle} | |"]
    for r in table:
        acc = "" if r.needle is None else f"{r.needle:.2f}"
        moved = ""
        if r.needles_p is not None:
            moved = f"-{r.needles_lost} / +{r.needles_gained}, p {r.needles_p:.2g}"
        lines.append(
            f"| {r.kv_target:.3g} | {r.method} | {r.kv_fraction:.3f} | {r.loss:.4f} | "
            f"{_ci(r.vs_full)} | {_ci(r.vs_uniform)} | {_p(r.holm_p)} | {acc} | {moved} |"
        )
    return head + "\n".join(lines) + "\n"
