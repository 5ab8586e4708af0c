"""`aah report RESULTS_DIR`: the multi-seed suite report, on a synthetic results directory.

No training: the cells' files are written directly with known numbers, so every statistic
and verdict in REPORT.md can be checked against hand-computed values.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from aah import records
from aah.cli import main
from aah.report import stats, suite_plots
from aah.report.suite import REPORT, build_suite_report, equal_time, load_suite
from aah.sweep.results import COLUMNS, write_csv
from aah.train.run_config import RunConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T, BATCH, STEPS, EVAL_EVERY = 64, 2, 40, 10
TOKENS_PER_STEP = BATCH * T
BASE_TPS = {0: 1000.0, 1: 1100.0, 2: 900.0}  # full's train tokens/s per seed
FULL_BPB = {0: 2.00, 1: 2.10, 2: 2.05}
# regime -> (val_bpb - full's per seed, speed ratio to full per seed, ACR, window)
REGIMES: dict[str, tuple[dict[int, float], dict[int, float], float, int]] = {
    "full": ({0: 0.0, 1: 0.0, 2: 0.0}, {0: 1.0, 1: 1.0, 2: 1.0}, 1.0, T),
    "fixed": ({0: -0.10, 1: -0.09, 2: -0.11}, {0: 1.2, 1: 1.2, 2: 1.2}, 0.3, 16),  # clearly better
    "random": ({0: 0.05, 1: -0.06, 2: 0.02}, {0: 1.2, 1: 1.2, 2: 1.2}, 0.4, 32),  # noise
    "aah-v3-shallow-freeze": ({0: -0.02, 1: 0.01, 2: -0.03}, {0: 0.5, 1: 0.52, 2: 0.48}, 0.5, 8),
    "budget": ({0: 0.20, 1: 0.22}, {0: 0.8, 1: 0.8}, 0.3, 4),  # budget-s2 is missing
}


def _config() -> str:
    config = RunConfig()
    config.model.n_layer, config.model.n_head, config.model.n_kv_head = 2, 2, 2
    config.model.d_model, config.model.max_seq_len = 32, T
    config.train.batch_size, config.train.max_steps = BATCH, STEPS
    config.train.eval_interval, config.train.eval_batches, config.train.threads = EVAL_EVERY, 2, 1
    config.data.max_bytes = 200_000  # the reference lines read the corpus: keep it short
    return config.to_toml()


def final_bpb(regime: str, seed: int) -> float:
    return FULL_BPB[seed] + REGIMES[regime][0][seed]


def tps(regime: str, seed: int) -> float:
    return BASE_TPS[seed] * REGIMES[regime][1][seed]


def val_bpb_at_step(regime: str, seed: int, step: int) -> float:
    """Linear in step (so interpolation in train_s is exact): final + 0.1 per 10 steps left."""
    return final_bpb(regime, seed) + 0.01 * (STEPS - step)


def write_cell(run_dir: Path, regime: str, seed: int, *, train_s: bool = True) -> dict:
    run_dir.mkdir(parents=True)
    records.write_json(run_dir / "cell.json", {"regime": regime, "seed": seed})
    (run_dir / records.CONFIG).write_text(_config())
    speed, acr, window = tps(regime, seed), REGIMES[regime][2], REGIMES[regime][3]
    for step in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY):
        record = {
            "step": step,
            "train_loss": 3.0,
            "tokens": step * TOKENS_PER_STEP,
            "acr": acr,
            "causal_coverage": acr,
            "tokens_per_s": speed,
            "val_bpb": val_bpb_at_step(regime, seed, step),
        }
        record["val_loss"] = record["val_bpb"] / 2
        if train_s:
            record["train_s"] = step * TOKENS_PER_STEP / speed
            record["wall_s"] = record["train_s"] + 1.0
        records.append_jsonl(run_dir / records.METRICS, record)
    for step in (0, 20):  # full windows first, then the regime's own
        w = T if step == 0 else window
        plan = {"step": step, "windows": [[w, w], [w, T]], "groups": []}
        records.append_jsonl(run_dir / records.PLANS, plan)
    summary = {
        "seq_len": T,
        "steps": STEPS,
        "tokens": STEPS * TOKENS_PER_STEP,
        "val_loss": final_bpb(regime, seed) / 2,
        "val_bpb": final_bpb(regime, seed),
        "acr": acr,
        "causal_coverage": acr,
        "executed_ratio": acr,
        "train_tokens_per_s": speed,
        "wall_s": STEPS * TOKENS_PER_STEP / speed + 1,
    }
    records.write_json(run_dir / records.SUMMARY, summary)
    return {"regime": regime, **summary, "seed": seed}


def write_suite(root: Path, name: str, regimes: list[str], **kwargs: bool) -> Path:
    rows = []
    for regime in regimes:
        for seed in REGIMES[regime][0]:
            rows.append(write_cell(root / name / f"{regime}-s{seed}", regime, seed, **kwargs))
    write_csv(root / f"{name}.csv", rows)
    return root


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_suite(tmp_path_factory.mktemp("results"), "screening", list(REGIMES))
    unfinished = root / "screening" / "budget-s2"  # started, not in the CSV yet
    unfinished.mkdir()
    records.write_json(unfinished / "cell.json", {"regime": "budget", "seed": 2})
    return root


@pytest.fixture(scope="module")
def report(results: Path) -> str:
    assert main(["report", str(results)]) == 0
    return (results / REPORT).read_text()


# ---- statistics ---------------------------------------------------------------------------


def test_mean_and_sample_sd() -> None:
    assert stats.mean([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert stats.sd([1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(5 / 3))
    assert math.isnan(stats.sd([1.0])) and math.isnan(stats.mean([]))


@pytest.mark.parametrize(
    ("t", "df"), [(12.706, 1), (4.303, 2), (3.182, 3), (2.776, 4), (2.228, 10), (1.960, 1e9)]
)
def test_t_two_sided_p_at_known_95_quantiles(t: float, df: float) -> None:
    assert stats.t_two_sided_p(t, df) == pytest.approx(0.05, abs=2e-4)
    assert stats.t_critical(df) == pytest.approx(t, abs=1e-3)


def test_t_cdf_shapes() -> None:
    assert stats.t_cdf(0.0, 3) == pytest.approx(0.5)
    assert stats.t_cdf(-1.0, 1) == pytest.approx(0.25)  # Cauchy: 1/2 + atan(t)/pi
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75)
    normal = 0.5 * math.erfc(-1.5 / math.sqrt(2))
    assert stats.t_cdf(1.5, 50_000) == pytest.approx(normal, abs=1e-5)  # large df: normal
    assert stats.betainc(2, 3, 0.4) == pytest.approx(0.5248)


def test_estimate_ci_and_single_value() -> None:
    e = stats.estimate([1.0, 2.0, 3.0, 4.0])
    half = 3.182446 * math.sqrt(5 / 3) / 2
    assert e.ci == pytest.approx((2.5 - half, 2.5 + half), abs=1e-5)
    assert e.t == pytest.approx(2.5 / (math.sqrt(5 / 3) / 2)) and e.p == pytest.approx(
        0.0305, abs=1e-4
    )
    one = stats.estimate([0.3])
    assert one.mean == 0.3 and math.isnan(one.sd) and not one.distinguishable


def test_paired_differences_and_seed_counts(results: Path) -> None:
    suite = load_suite(results / "screening.csv")
    pairs = stats.paired(suite.rows, "val_bpb")
    assert set(pairs) == set(REGIMES) - {"full"}
    for regime, pair in pairs.items():
        deltas = REGIMES[regime][0]
        assert pair.seeds == tuple(sorted(deltas))
        assert pair.diffs == pytest.approx([deltas[s] for s in sorted(deltas)], abs=1e-6)
    assert (pairs["fixed"].lower, pairs["fixed"].n) == (3, 3)
    assert (pairs["random"].lower, pairs["random"].n) == (1, 3)
    assert pairs["aah-v3-shallow-freeze"].lower == 2
    assert (pairs["budget"].lower, pairs["budget"].n) == (0, 2)
    fixed = pairs["fixed"].estimate
    assert fixed.mean == pytest.approx(-0.10, abs=1e-6) and fixed.sd == pytest.approx(
        0.01, abs=1e-6
    )
    assert fixed.ci[1] < 0 and fixed.distinguishable
    assert not pairs["random"].estimate.distinguishable
    ratios = stats.speed_ratios(suite.rows)
    assert ratios["aah-v3-shallow-freeze"] == pytest.approx({0: 0.5, 1: 0.52, 2: 0.48}, rel=1e-5)
    with pytest.raises(ValueError, match="'full'"):
        stats.paired([r for r in suite.rows if r["regime"] != "full"], "val_bpb")


def test_value_at_interpolates_and_clamps() -> None:
    points = [(3.0, 2.0), (1.0, 3.0), (7.0, 1.0)]  # unsorted on purpose
    assert stats.value_at(points, 2.0) == pytest.approx(2.5)
    assert stats.value_at(points, 5.0) == pytest.approx(1.5)
    assert stats.value_at(points, 0.5) == 3.0  # before the first eval: the first eval
    assert stats.value_at(points, 9.0) == 1.0  # after the last: the final value
    grid, values = stats.mean_curve([[(0.0, 1.0), (4.0, 3.0)], [(1.0, 0.0), (3.0, 0.0)]], 3)
    assert grid == [1.0, 2.5, 4.0] and values == pytest.approx([0.75, 1.125, 1.5])


def test_equal_time_budget_and_values(results: Path) -> None:
    eq = equal_time(load_suite(results / "screening.csv"))
    finals = {
        r: stats.mean([STEPS * TOKENS_PER_STEP / tps(r, s) for s in REGIMES[r][0]]) for r in REGIMES
    }
    assert eq.fastest == "fixed" and eq.t_star == pytest.approx(finals["fixed"])
    for seed in (0, 1, 2):  # val_bpb is linear in step, step linear in train_s: exact
        step = eq.t_star * tps("full", seed) / TOKENS_PER_STEP
        assert eq.values["full"][seed] == pytest.approx(val_bpb_at_step("full", seed, step))
    assert "fixed-s1" in eq.held  # its last eval (fastest seed) came before t*
    assert eq.values["fixed"][1] == pytest.approx(final_bpb("fixed", 1))


# ---- the report ---------------------------------------------------------------------------


def test_report_lists_every_regime_and_tables(report: str, results: Path) -> None:
    for regime in REGIMES:
        assert f"`{regime}`" in report
    for heading in (
        "Quality and cost",
        "Paired against full (per seed)",
        "Equal wall-clock",
        "What holds at this scale",
        "Caveats",
    ):
        assert f"### {heading}" in report
    assert f"aah report {results}" in report
    assert "Missing cells (tables use the seeds present): budget-s2." in report
    assert "Not finished, left out: budget-s2." in report
    assert "| `fixed` | -0.1000 | 0.0100 |" in report
    assert "coverage over training" in report
    fixed_row = next(l for l in report.splitlines() if l.startswith("| `fixed` | 3 |"))
    assert fixed_row.split(" | ")[6] == "0.300"  # mean of the logged coverage (0.3 throughout)
    assert "2 × 2 × 64 = 256 validation tokens" in report
    quality = report.index("### Quality and cost")
    order = [
        report.index(f"| `{r}` |", quality) for r in ("full", "fixed", "aah-v3-shallow-freeze")
    ]
    assert order == sorted(order)  # full first, then by mean val_bpb


def test_verdicts_classify_clear_and_noisy_regimes(report: str) -> None:
    lines = {line.split("`")[1]: line for line in report.splitlines() if line.startswith("- `")}
    assert "lower val_bpb than full by 0.1000" in lines["fixed"]
    # clear on every seed, yet 3 seeds are fewer than the 5 a verdict needs
    assert "3/3 seeds lower): undecided with 3 seeds." in lines["fixed"]
    assert "undecided with 3 seeds" in lines["random"]
    assert "1/3 seeds lower" in lines["random"]
    assert "higher val_bpb than full by 0.2100" in lines["budget"]
    assert "0/2 seeds lower): undecided with 2 seeds." in lines["budget"]
    claims = {line[:2]: line for line in report.splitlines() if re.match(r"\d\. \*", line)}
    assert "**undecided at 3 seeds**" in claims["1."]  # fixed beats full, the others can't tell
    # every AAH regime against each control, one Holm family: never best-of after the fact
    assert "`aah-v3-shallow-freeze` vs `fixed`" in claims["2."]
    assert "`aah-v3-shallow-freeze` vs `random`" in claims["2."]
    assert "**undecided at 3 seeds**" in claims["2."]
    assert "**holds**" in claims["3."] and "0.50× (95% CI" in claims["3."]


def test_every_linked_png_exists(report: str, results: Path) -> None:
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    names = {
        f"screening_{k}.png" for k in ("val_curves", "acr", "quality_vs_coverage", "equal_time")
    }
    names |= {f"screening_windows_{r}.png" for r in REGIMES if r != "full"}
    assert set(links) == names
    for link in links:
        assert (results / link).read_bytes().startswith(PNG_MAGIC)


def test_out_dir_no_full_and_no_train_s(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = write_suite(tmp_path / "old", "old", ["fixed"], train_s=False)
    out = tmp_path / "elsewhere"
    assert main(["report", str(root), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / REPORT)
    text = (out / REPORT).read_text()
    assert "No `full` regime in this suite: no paired comparison." in text
    assert "Skipped: fixed-s0's metrics.jsonl has no train_s" in text
    assert not (out / "old_equal_time.png").exists() and (out / "old_acr.png").exists()
    assert not (root / REPORT).exists()


def test_header_only_csv(tmp_path: Path) -> None:
    write_csv(tmp_path / "headline.csv", [])
    text = build_suite_report(tmp_path).read_text()
    assert "No finished cells yet" in text


def test_neither_run_nor_results_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "summary.json" in err and ".csv" in err


def test_csv_missing_a_column_names_it(tmp_path: Path) -> None:
    header = ",".join(c for c in COLUMNS if c != "val_bpb")
    (tmp_path / "broken.csv").write_text(header + "\n")
    with pytest.raises(ValueError, match="val_bpb"):
        build_suite_report(tmp_path)


def test_suite_plots_without_matplotlib_say_how_to_install(monkeypatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(ValueError, match="pip install matplotlib"):
        suite_plots.quality_vs_coverage({"full": (1.0, 2.0, 0.1)}, tmp_path / "x.png", "t")


def test_regimes_with_the_same_plans_on_every_seed_are_named(tmp_path: Path) -> None:
    from aah.report.findings import identical_regimes

    root = write_suite(tmp_path, "twins", ["full", "fixed", "random"])
    for seed in (0, 1, 2):
        plans = (root / "twins" / f"fixed-s{seed}" / records.PLANS).read_text()
        (root / "twins" / f"random-s{seed}" / records.PLANS).write_text(plans)
    suite = load_suite(root / "twins.csv")
    assert identical_regimes(suite) == [["fixed", "random"]]
    assert main(["report", str(root)]) == 0
    text = (root / REPORT).read_text()
    assert "`fixed`, `random` chose the same windows at every update on every seed" in text
    (root / "twins" / "random-s1" / records.PLANS).write_text('{"step": 0, "windows": [[1]]}\n')
    assert identical_regimes(load_suite(root / "twins.csv")) == []


def test_matched_pairs_show_their_coverage_gap(report: str) -> None:
    line = next(
        x for x in report.splitlines() if x.startswith("| `aah-v3-shallow-freeze` | `random` |")
    )
    assert line.endswith("| +0.100 (not matched) |")  # coverage 0.5 vs 0.4 on every seed


def test_coverage_gap_is_taken_on_the_seeds_both_regimes_finished() -> None:
    from aah.report.accuracy import coverage_gap, coverage_gap_cell
    from aah.report.suite_data import Suite

    rows = [
        {"regime": "twin", "seed": 0, "causal_coverage": 0.50},
        {"regime": "twin", "seed": 1, "causal_coverage": 0.30},
        {"regime": "aah", "seed": 0, "causal_coverage": 0.50},
        {"regime": "aah", "seed": 1, "causal_coverage": 0.30},
        {"regime": "aah", "seed": 2, "causal_coverage": 0.90},  # the twin has no seed 2 yet
    ]
    suite = Suite("partial", rows)
    assert coverage_gap(suite, "aah", "twin") == pytest.approx(0.0)  # not 0.567 - 0.400
    rows[1]["causal_coverage"] = 0.20
    assert coverage_gap(suite, "aah", "twin") == pytest.approx(0.05)
    rows[:2] = []  # no seed in common: no gap to show
    assert coverage_gap_cell(suite, "aah", "twin") == "n/a"


@pytest.mark.parametrize("suffix", ["-replay-shuffled", "-replay-scattered"])
def test_a_replay_twin_is_a_control_not_an_aah_regime_in_the_paper_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    twin = "aah-v3-shallow-freeze" + suffix
    monkeypatch.setitem(REGIMES, twin, REGIMES["aah-v3-shallow-freeze"])
    root = write_suite(
        tmp_path, "twins", ["full", "fixed", "random", "aah-v3-shallow-freeze", twin]
    )
    assert main(["report", str(root)]) == 0
    claims = [x for x in (root / REPORT).read_text().splitlines() if x[:3] in ("1. ", "2. ", "3. ")]
    assert len(claims) == 3 and all("`aah-v3-shallow-freeze`" in x for x in claims)
    assert not any(twin in x for x in claims)
    matched = (root / REPORT).read_text().split("### Matched controls")[1]
    assert f"| `aah-v3-shallow-freeze` | `{twin}` |" in matched  # the pair it was run for


def test_report_corrects_for_multiple_comparisons(report: str) -> None:
    assert "The 4 comparisons with full are one family" in report
    assert "Holm p corrects for the 4 comparisons of this table" in report
    assert "chose the same windows" not in report


def test_a_comparison_without_a_p_value_is_not_counted_in_the_holm_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(REGIMES, "budget", ({0: 0.20}, {0: 0.8}, 0.3, 4))  # one seed: no p
    root = write_suite(tmp_path, "partial", ["full", "fixed", "random", "budget"])
    assert main(["report", str(root)]) == 0
    report = (root / REPORT).read_text()
    assert (
        "Holm p corrects for the 2 comparisons of this table that have a p-value "
        "(1 with one seed has none)" in report
    )
    assert "The 2 comparisons with full that have a p-value (1 with one seed" in report


def test_report_states_reference_lines(report: str) -> None:
    found = re.search(
        r"a unigram model scores (\d+\.\d+) bits/byte and a bigram model (\d+\.\d+)", report
    )
    assert found, "the report gives unigram and bigram bits/byte"
    unigram, bigram = map(float, found.groups())
    assert 0 < bigram < unigram < 8  # a bigram knows more than a unigram; both beat uniform


def test_recall_suite_gets_an_accuracy_section(tmp_path: Path) -> None:
    far = {"full": {0: 1.0, 1: 0.98, 2: 0.99}, "fixed": {0: 0.12, 1: 0.14, 2: 0.13}}
    rows = []
    for regime, by_seed in far.items():
        for seed, acc in by_seed.items():
            row = write_cell(tmp_path / "recall" / f"{regime}-s{seed}", regime, seed)
            rows.append(
                {**row, "val_acc": 0.5 + acc / 2, "val_acc_far": acc, "far_bucket": "32-63"}
            )
    write_csv(tmp_path / "recall.csv", rows)
    assert main(["report", str(tmp_path)]) == 0
    text = (tmp_path / REPORT).read_text()
    assert "### Recall accuracy" in text and "accuracy at 32-63" in text
    line = next(x for x in text.splitlines() if x.startswith("| `fixed` | `full` |"))
    assert "-0.860" in line and "undecided" in line  # three seeds: never decided
    assert line.endswith("| -0.700 (not matched) |")  # write_cell: fixed 0.3 vs full 1.0
    write_csv(
        tmp_path / "recall.csv", [{k: v for k, v in r.items() if k != "val_acc_far"} for r in rows]
    )
    assert main(["report", str(tmp_path)]) == 0
    assert "### Recall accuracy" not in (tmp_path / REPORT).read_text()  # a text suite has none


def _cut_rows(full_bpb: float, cut_bpb: dict[int, float], far: dict[str, float] | None) -> list:
    rows = [{"cut": "plan in force", "window": None, "val_bpb": full_bpb}]
    for w, bpb in cut_bpb.items():
        rows.append({"cut": str(w), "window": w, "val_bpb": bpb})
    rows.append({"cut": "full", "window": 256, "val_bpb": full_bpb})
    if far is not None:
        for row in rows:
            acc = far.get(str(row["window"]), 1.0)
            row["val_acc_by_distance"] = {"4-127": 1.0, "128-255": acc}
    return rows


def test_context_use_section_and_gate(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "text", "screening", ["full", "fixed"])
    report_text = lambda: (main(["report", str(root)]), (root / REPORT).read_text())[1]  # noqa: E731
    assert "Not measured: run `aah eval RUN --cut-windows" in report_text()
    for seed, (d64, d128) in {0: (0.10, 0.02), 1: (0.12, 0.03), 2: (0.11, 0.04)}.items():
        rows = _cut_rows(2.0, {64: 2.0 + d64, 128: 2.0 + d128}, None)
        records.write_json(root / "screening" / f"full-s{seed}" / "cut_windows.json", rows)  # type: ignore[arg-type]
    text = report_text()
    assert re.search(r"\| 128 \| 3 \| \+0\.0300 \|", text)
    assert "Gate (not met): cutting every head to w = 128 costs +0.0300 bits/byte" in text
    assert "Its 95% CI [+0.0052, +0.0548] reaches both sides of 0.05 (3 of 3 seeds" in text
    for seed, d128 in {0: 0.058, 1: 0.061, 2: 0.049}.items():  # met on the mean, narrowly
        rows = _cut_rows(2.0, {128: 2.0 + d128}, None)
        records.write_json(root / "screening" / f"full-s{seed}" / "cut_windows.json", rows)  # type: ignore[arg-type]
    text = report_text()
    assert "Gate (met): cutting every head to w = 128 costs +0.0560 bits/byte" in text
    assert "Its 95% CI [+0.0405, +0.0715] reaches both sides of 0.05 (1 of 3 seeds" in text
    for seed in (0, 1, 2):  # a task: far accuracy collapses below the bucket
        rows = _cut_rows(2.0, {64: 2.1, 128: 2.05}, {"64": 0.1, "128": 0.2 + 0.1 * seed})
        records.write_json(root / "screening" / f"full-s{seed}" / "cut_windows.json", rows)  # type: ignore[arg-type]
    assert (
        "Gate (met): cutting every head to w = 128 lowers the accuracy at distances 128-255 "
        "by 0.700" in report_text()
    )


@pytest.mark.parametrize(
    ("ratios", "verdict"),
    [
        ({"aah-v3-a": [0.9, 0.91, 0.92], "aah-v3-b": [1.1, 1.11, 1.12]}, "mixed"),
        ({"aah-v3-a": [0.9, 0.91, 0.92], "aah-v3-b": [0.8, 0.81, 0.82]}, "holds"),
        ({"aah-v3-a": [1.2, 1.21, 1.22], "aah-v3-b": [0.8, 1.3, 1.0]}, "does not hold"),
        ({"aah-v3-a": [0.9, 0.91, 0.92], "aah-v3-b": [0.8, 1.3, 1.0]}, "undecided at 3 seeds"),
    ],
)
def test_speed_claim_is_mixed_when_one_regime_is_slower_and_another_faster(
    ratios: dict[str, list[float]], verdict: str
) -> None:
    from aah.report.findings import _claim_speed

    per_seed = {r: dict(enumerate(v)) for r, v in ratios.items()}
    assert f"**{verdict}**" in _claim_speed(list(ratios), per_seed)
