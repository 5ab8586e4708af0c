"""Readable reports: every key has a unit and definition, versions are recorded and shown,
figures are print quality, windows and regimes have distinct, stable colours, and labels
and legends never cover each other or the data."""

from __future__ import annotations

import json
import struct
from itertools import combinations
from pathlib import Path

import pytest
from cli_paths import tiny_run_args

from aah.cli import main
from aah.report import plots, suite_plots
from aah.report.glossary import describe

PROVENANCE = ("aah_version", "torch_version", "python_version", "git_commit", "date")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_corpus):
    run = tmp_path_factory.mktemp("readable") / "run"
    assert main(["train", *tiny_run_args(tiny_corpus, run)]) == 0
    return run


def test_summary_records_versions_commit_and_date(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    assert all(key in summary for key in PROVENANCE)
    assert summary["torch_version"] and summary["date"][:2] == "20"


def test_every_summary_and_metrics_key_has_a_definition(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = set(summary) | {k for row in metrics for k in row}
    assert not [k for k in sorted(keys) if not describe(k)]
    assert describe("ctrl_s").startswith("s: ") and describe("acr").startswith("fraction: ")


def test_the_run_report_shows_units_definitions_and_versions(run_dir, capsys):
    assert main(["report", str(run_dir)]) == 0
    page = (run_dir / "report" / "report.html").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert f"torch {summary['torch_version']}" in page and "Trained with aah" in page
    assert "seconds spent in the window controller" in page and "bits/byte" in page


def png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_figures_are_at_least_150_dpi(tmp_path):
    path = plots.loss_curve([{"step": 1, "train_loss": 2.0}, {"step": 2, "train_loss": 1.5}],
                            tmp_path / "loss.png")  # fmt: skip
    width, _ = png_size(path)
    assert plots.DPI >= 150 and width >= 6 * 150 * 0.9  # a 6-inch figure, tight bbox


def rgb_distance(a, b) -> float:
    return sum((x - y) ** 2 for x, y in zip(a[:3], b[:3], strict=True)) ** 0.5


def test_neighbouring_windows_get_clearly_different_colours():
    plan = [[32, 64, 4096, 4096]]
    cmap, norm = plots.window_palette(plots.window_levels([plan], 4096))
    c32, c64 = cmap(norm(5.0)), cmap(norm(6.0))
    assert rgb_distance(c32, c64) > 0.15
    assert plots.window_levels([plan], 4096) == (5, 12)


def test_a_regime_has_one_colour_in_every_suite():
    one = suite_plots.regime_colors(["full", "budget", "fixed"])
    other = suite_plots.regime_colors(["random", "fixed", "budget", "my-variant"])
    assert one["budget"] == other["budget"] and one["fixed"] == other["fixed"]
    assert one["full"] == "black"
    known = suite_plots.regime_colors([p for p in suite_plots.POLICIES if p != "full"])
    assert len(set(map(tuple, known.values()))) == len(known)  # all distinct


def test_point_labels_do_not_overlap():
    plt = plots._pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.set_xlim(0, 1)
    ax.set_ylim(2.0, 2.2)
    labels = [ax.annotate(f"regime-{i}", (0.3, 2.1 + i * 1e-4), textcoords="offset points",
                          xytext=(6, 4), fontsize=8) for i in range(8)]  # fmt: skip
    suite_plots.spread_labels(fig, labels)
    renderer = fig.canvas.get_renderer()
    boxes = [label.get_window_extent(renderer) for label in labels]
    assert not any(a.overlaps(b) for a, b in combinations(boxes, 2))
    plt.close(fig)


def test_the_legend_sits_outside_the_axes():
    plt = plots._pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i in range(5):
        ax.plot([0, 100], [1.0, 1.0 - 0.1 * i], label=f"regime {i}")
    suite_plots._finish(ax, "step", "ACR", "t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend, axes = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= axes.x1
    plt.close(fig)
