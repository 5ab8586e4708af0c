"""`aah report RESULTS_DIR`: one markdown report over the suites of a results directory.

Input (from `aah sweep`): `RESULTS_DIR/<suite>.csv` (one row per finished cell) and
`RESULTS_DIR/<suite>/<regime>-s<seed>/` run directories. Output: `REPORT.md` with the
suites' tables, verdicts and `<suite>_<figure>.png` figures beside it (links are relative).

Every number in the text is computed here from those files; the sentences only classify
what the statistics show (95% CIs over seeds, paired on seed), nothing beyond them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from aah import records
from aah.report import assignment, comparisons, glossary, provenance, stats, suite_plots
from aah.report.accuracy import COVERAGE_GAP_RULE, accuracy_section, coverage_gap_cell
from aah.report.baselines import baseline_lines, suite_baselines
from aah.report.context_gate import context_use_section
from aah.report.findings import caveats, findings
from aah.report.layer_coverage import layer_coverage_section
from aah.report.markdown import ci_text, count, fmt, p_text, pm, seeds_text, table, threads_text
from aah.report.suite_data import (
    BASELINE,
    EqualTime,
    Record,
    Suite,
    equal_time,
    is_results_dir,
    load_suite,
)
from aah.report.topology import topology_section
from aah.sweep.config import cell_name
from aah.sweep.results import COLUMNS, TASK_COLUMNS

__all__ = ["REPORT", "build_suite_report", "equal_time", "is_results_dir", "load_suite"]

REPORT = "REPORT.md"
QUALITY_HEADER = (
    "regime | n | val_bpb mean ± sd | val_loss mean ± sd | ACR | causal coverage | "
    "coverage over training | executed ratio | train tok/s | speed vs full | wall s"
)
PAIRED_HEADER = (
    "regime | Δ val_bpb mean | sd | 95% CI | t | p | Holm p | seeds lower than full | verdict"
)
MATCHED_HEADER = (
    "regime | control | Δ val_bpb mean | 95% CI | p | Holm p | seeds lower | verdict | "
    "Δ causal coverage"
)
EQUAL_TIME_HEADER = (
    "regime | n | val_bpb at t* mean ± sd | Δ vs full | 95% CI | p | seeds lower than full"
)


def _setup(suite: Suite) -> list[str]:
    model = suite.config.get("model", {})
    train = suite.config.get("train", {})
    data = suite.config.get("data", {})
    seq_len = suite.seq_len
    steps = sorted({int(r["steps"]) for r in suite.rows})
    tokens = sorted({int(r["tokens"]) for r in suite.rows})
    parts = [f"T = {seq_len}"]
    if model:
        parts.append(
            f"model {model.get('n_layer')} layers, d_model {model.get('d_model')}, "
            f"{model.get('n_head')} heads"
        )
    else:
        parts.append("model size unknown (no cell config.toml)")
    batch = f" × batch {train['batch_size']}" if "batch_size" in train else ""
    parts.append(
        f"{'/'.join(map(str, steps))} steps{batch}, "
        f"{'/'.join(f'{t:,}' for t in tokens)} tokens per cell"
    )
    if "threads" in train:
        parts.append(f"{threads_text(train['threads'])} per cell")
    if data:
        parts.append(f"corpus {data.get('path') or data.get('corpus')}")
    parts.append(f"seeds {', '.join(map(str, suite.seeds))}")
    grid = len(suite.regimes) * len(suite.seeds)
    parts.append(
        f"{count(len(suite.rows), 'finished cell')} of the {count(len(suite.regimes), 'regime')}"
        f" × {seeds_text(len(suite.seeds))} = {grid} seen"
    )
    lines = ["Setup: " + "; ".join(parts) + "."]
    missing = missing_cells(suite)
    if missing:
        lines += ["", f"Missing cells (tables use the seeds present): {', '.join(missing)}."]
    if suite.unfinished:
        lines += ["", f"Not finished, left out: {', '.join(suite.unfinished)}."]
    return lines


def missing_cells(suite: Suite) -> list[str]:
    """The cells of the regimes x seeds grid the CSV has no row for, by name."""
    have = {(r["regime"], int(r["seed"])) for r in suite.rows}
    return [cell_name(r, s) for r in suite.regimes for s in suite.seeds if (r, s) not in have]


def _quality_table(suite: Suite, ratios: dict[str, dict[int, float]]) -> list[str]:
    stats_cols = ("acr", "causal_coverage", "executed_ratio", "train_tokens_per_s", "wall_s")
    rows = []
    for regime in suite.regimes:
        speed = list(ratios.get(regime, {}).values())
        mean = {m: stats.mean(suite.values(regime, m)) for m in stats_cols}
        rows.append([
            f"`{regime}`", str(len(suite.values(regime, "val_bpb"))),
            pm(suite.values(regime, "val_bpb")), pm(suite.values(regime, "val_loss")),
            fmt(mean["acr"], ".3f"), fmt(mean["causal_coverage"], ".3f"),
            fmt(_training_coverage(suite, regime), ".3f"),
            fmt(mean["executed_ratio"], ".3f"), fmt(mean["train_tokens_per_s"], ",.0f"),
            fmt(stats.mean(speed), ".2f") + "×" if speed else "n/a",
            fmt(mean["wall_s"], ",.0f"),
        ])  # fmt: skip
    header = QUALITY_HEADER.split(" | ")
    return table(header, rows)


def _training_coverage(suite: Suite, regime: str) -> float:
    """Causal coverage averaged over each cell's logged steps (warm-up included), then over
    seeds: the share of attention work a regime really skipped while training."""
    per_run = []
    for run in suite.runs(regime):
        values = [float(r["causal_coverage"]) for r in run.metrics if "causal_coverage" in r]
        if values:
            per_run.append(stats.mean(values))
    return stats.mean(per_run) if per_run else float("nan")


def _delta_cells(pair: stats.Paired | None, full: bool = True) -> list[str]:
    """Δ mean, (sd,) 95% CI, (t,) p and k/n seeds lower of one paired comparison."""
    if pair is None or pair.n == 0:
        return ["no seed in common with full"] + [""] * (5 if full else 3)
    e = pair.estimate
    cells = [fmt(e.mean, "+.4f"), fmt(e.sd), ci_text(e.ci), fmt(e.t, ".2f"), p_text(e.p)]
    return [*(cells if full else [cells[0], cells[2], cells[4]]), f"{pair.lower}/{pair.n}"]


VERDICT_RULE = (
    f"Verdict: lower / higher only with at least {comparisons.MIN_SEEDS} seeds and a Holm p "
    f"below {comparisons.ALPHA}; otherwise undecided, whatever the sign of Δ."
)


def _comparison_cells(comp: comparisons.Comparison | None) -> list[str]:
    """Δ mean, sd, 95% CI, t, p, Holm p, k/n seeds lower and the verdict of one comparison."""
    if comp is None or comp.pair.n == 0:
        return ["no seed in common with full"] + [""] * 7
    e = comp.pair.estimate
    return [
        fmt(e.mean, "+.4f"), fmt(e.sd), ci_text(e.ci), fmt(e.t, ".2f"), p_text(e.p),
        p_text(comp.holm_p), f"{comp.pair.lower}/{comp.pair.n}", comparisons.verdict_text(comp),
    ]  # fmt: skip


def _matched_section(suite: Suite, evidence: comparisons.Evidence) -> list[str]:
    family = evidence.of(comparisons.MATCHED_BPB)
    if not family:
        return []
    rows = []
    for comp in family:
        cells = _comparison_cells(comp)  # mean, sd, CI, t, p, Holm p, seeds lower, verdict
        names = [f"`{comp.pair.regime}`", f"`{comp.pair.baseline}`"]
        gap = coverage_gap_cell(suite, comp.pair.regime, comp.pair.baseline)
        rows.append(names + [cells[i] for i in (0, 2, 4, 5, 6, 7)] + [gap])
    return [
        "### Matched controls (per seed)",
        "",
        "What each pair differs in: "
        + "; ".join(
            f"`{c.pair.regime}` vs `{c.pair.baseline}`, "
            f"{comparisons.MATCHED_WHY[(c.pair.regime, c.pair.baseline)]}"
            for c in family
        )
        + ". Δ = regime − control on the same seed; Holm p corrects for the "
        f"{comparisons.family_size(family)}. {VERDICT_RULE} {COVERAGE_GAP_RULE}",
        "",
        comparisons.MATCHED_BPB.heading,
        "",
        *table(MATCHED_HEADER.split(" | "), rows),
        "",
        comparisons.power_line(family, "bits/byte"),
        "",
        *assignment.spread_lines(suite),
    ]


def _equal_time_section(suite: Suite, eq: EqualTime | str) -> list[str]:
    lines = ["### Equal wall-clock", ""]
    if isinstance(eq, str):
        return [*lines, f"Skipped: {eq}.", ""]
    lines.append(
        f"Quality at the same training time t* = {eq.t_star:,.1f} s (cumulative `train_s`, "
        "evaluation excluded): t* is the smallest, over regimes, of the mean training seconds "
        f"at the last evaluation (`{eq.fastest}`), so every regime has evaluations up to about "
        "t*. Each seed's val_bpb at t* is interpolated linearly between its evaluations around "
        "t*; a seed whose first evaluation came after t* contributes that first evaluation, "
        "one whose last evaluation came before t* its last (it had finished training)."
    )
    if eq.early:
        lines += ["", f"First evaluation after t*: {', '.join(eq.early)}."]
    if eq.held:
        lines += ["", f"Finished before t*: {', '.join(eq.held)}."]
    base = eq.values.get(BASELINE)
    header = EQUAL_TIME_HEADER.split(" | ")
    rows = []
    for regime, values in eq.values.items():
        row = [f"`{regime}`", str(len(values)), pm(list(values.values()))]
        if base is None:  # no baseline: no Δ columns
            header = header[:3]
        elif regime == BASELINE:
            row += [""] * 4
        else:
            row += _delta_cells(stats.paired_by_seed(regime, values, BASELINE, base), False)
        rows.append(row)
    return [*lines, "", *table(header, rows), ""]


def _figures(suite: Suite, eq: EqualTime | str, out_dir: Path) -> list[tuple[str, str]]:
    """Draw the suite's figures into out_dir; (file name, caption) of each, in page order."""
    figures: list[tuple[str, str]] = []

    def path(kind: str) -> Path:
        return out_dir / f"{suite.name}_{kind}.png"

    runs = {r: [c.metrics for c in suite.runs(r)] for r in suite.regimes if suite.runs(r)}
    if runs:
        p = suite_plots.val_curves(runs, path("val_curves"), f"{suite.name}: val_bpb")
        figures.append((p.name, "val_bpb against step (mean over seeds, band: min to max)"))
        p = suite_plots.acr_curves(runs, path("acr"), f"{suite.name}: ACR")
        figures.append((p.name, "ACR over training (mean over seeds)"))
    points = {
        r: (
            stats.mean(suite.values(r, "causal_coverage")),
            stats.mean(suite.values(r, "val_bpb")),
            stats.sd(suite.values(r, "val_bpb")),
        )
        for r in suite.regimes
    }
    p = suite_plots.quality_vs_coverage(points, path("quality_vs_coverage"), suite.name)
    figures.append((p.name, "final val_bpb (mean ± sd over seeds) against causal coverage"))
    if isinstance(eq, EqualTime):
        p = suite_plots.equal_time(eq.curves, eq.t_star, path("equal_time"), suite.name)
        figures.append((p.name, "val_bpb against training seconds (mean over seeds), t* marked"))
    seq_len = suite.seq_len
    for regime in suite.regimes:
        cells = [c for c in suite.runs(regime) if c.plans]
        if regime == BASELINE or not cells or not _windows_vary(cells[0].plans, seq_len):
            continue
        p = suite_plots.window_snapshots(cells[0].plans, seq_len, path(f"windows_{regime}"))
        figures.append(
            (p.name, f"`{regime}` windows (layer × head) over training, seed {cells[0].seed}")
        )
    return figures


def _windows_vary(plans: list[Record], seq_len: int) -> bool:
    """Some plan has a window below T (else the heatmaps would be uniformly full)."""
    return any(int(w) < seq_len for p in plans for row in p["windows"] for w in row)


#: A section a caller adds to each suite's report, after "What holds at this scale": it gets
#: the suite, each regime's per-seed speed ratios to full and every comparison of the report.
Section = Callable[[Suite, dict[str, dict[int, float]], comparisons.Evidence], list[str]]


def _suite_section(
    suite: Suite, out_dir: Path, families: Sequence[comparisons.Family], extra: Sequence[Section]
) -> list[str]:
    lines = [f"## Suite `{suite.name}`", ""]
    if not suite.rows:
        lines.append(f"No finished cells yet (`{suite.name}.csv` has no rows).")
        if suite.unfinished:
            lines.append(f"Started: {', '.join(suite.unfinished)}.")
        return [*lines, ""]
    lines += [*_setup(suite), ""]
    ratios = stats.speed_ratios(suite.rows) if suite.has_baseline else {}
    lines += ["### Quality and cost", "", *_quality_table(suite, ratios), ""]
    lines += layer_coverage_section(suite)
    if suite.config:
        lines += baseline_lines(suite_baselines(suite.config))
    if suite.has_baseline:
        lines += context_use_section(suite)
    evidence = comparisons.evidence(suite, families)  # every comparison, computed once
    lines += ["### Paired against full (per seed)", ""]
    if suite.regimes == [BASELINE]:
        lines += ["Only `full` in this suite: nothing to pair it with.", ""]
    elif suite.has_baseline:
        family = {c.pair.regime: c for c in evidence.of(comparisons.AGAINST_FULL)}
        rows = [[f"`{r}`", *_comparison_cells(family.get(r))] for r in suite.regimes[1:]]
        lines += [comparisons.AGAINST_FULL.heading, ""]
        lines += [*table(PAIRED_HEADER.split(" | "), rows), ""]
        lines += [
            "Δ = regime − full on the same seed; negative is better. 95% CI and p from "
            "Student's t over the per-seed differences; Holm p corrects for the "
            f"{comparisons.family_size(family.values())}. {VERDICT_RULE}",
            "",
            comparisons.power_line(family.values(), "bits/byte"),
            "",
        ]
    else:
        lines += ["No `full` regime in this suite: no paired comparison.", ""]
    lines += _matched_section(suite, evidence)
    lines += accuracy_section(suite, evidence, VERDICT_RULE)
    lines += topology_section(suite)
    eq = equal_time(suite) if suite.cells else "no cell run directories found"
    lines += _equal_time_section(suite, eq)
    lines += ["### Figures", ""]
    for name, caption in _figures(suite, eq, out_dir):
        lines += [f"![{caption}]({name})", ""]
    lines += findings(suite, ratios, evidence)
    for section in extra:
        lines += section(suite, ratios, evidence)
    return lines + caveats(suite)


def build_suite_report(
    results_dir: Path,
    out_dir: Path | None = None,
    *,
    families: Sequence[comparisons.Family] = comparisons.FAMILIES,
    extra_sections: Sequence[Section] = (),
    command: str = "aah report",
) -> Path:
    """Write REPORT.md and its figures for every `<suite>.csv` of `results_dir` into
    `out_dir` (default results_dir itself). Returns the path of REPORT.md.

    `families` are the Holm families the report tests (each declared before any number is
    computed; comparisons.py); `extra_sections` are added to each suite after its verdicts,
    and `command` is how the report names the command that regenerates it."""
    results_dir = Path(results_dir)
    csvs = sorted(results_dir.glob("*.csv")) if results_dir.is_dir() else []
    if not csvs:
        raise ValueError(f"{str(results_dir)!r} holds no <suite>.csv results (from aah sweep)")
    suites = [load_suite(path) for path in csvs]
    out_dir = Path(out_dir) if out_dir is not None else results_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    found = ", ".join(f"`{s.name}` ({count(len(s.rows), 'cell')})" for s in suites)
    lines = [
        "# AAH suite report",
        "",
        f"Suites found in `{results_dir}`: {found}. Each suite trains every regime on the same "
        "seeds; `full` (dense causal attention) is the baseline, and comparisons pair cells "
        "on seed. All numbers below are computed from the results CSVs and run directories; "
        f"regenerate with: `{command} {results_dir}`.",
        "",
        *provenance.suite_lines(c.path for s in suites for c in s.cells),
    ]
    for suite in suites:
        lines += _suite_section(suite, out_dir, families, extra_sections)
    terms = glossary.definitions([*COLUMNS, *TASK_COLUMNS])  # the results CSV's columns
    lines += ["## Definitions", "", *terms, ""]
    path = out_dir / REPORT
    records.write_text_atomic(path, "\n".join(lines).rstrip() + "\n")
    return path
