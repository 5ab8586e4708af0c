"""`aah report RUN_DIR`: one self-contained HTML page with the run's figures and numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aah.cli import main
from aah.report import plots
from aah.report.html import FIGURES, format_value

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: str) -> Path:
    """A tiny finished run whose budget controller updates the plan every step."""
    run = tmp_path_factory.mktemp("report") / "run"
    args = ["--out", str(run), "--no-progress", "--data.path", tiny_corpus,
            "--model.n_layer", "2", "--model.n_head", "4", "--model.n_kv_head", "2",
            "--model.d_model", "32", "--model.max_seq_len", "32",
            "--train.batch_size", "4", "--train.max_steps", "8", "--train.eval_interval", "4",
            "--train.log_interval", "2", "--train.eval_batches", "1", "--train.threads", "1",
            "--controller.policy", "budget", "--controller.warmup_steps", "0",
            "--controller.interval", "1"]  # fmt: skip
    assert main(["train", *args]) == 0
    return run


def test_report_writes_self_contained_html(run_dir: Path, capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 0
    out_dir = run_dir / "report"
    page_path = out_dir / "report.html"
    assert capsys.readouterr().out.strip() == str(page_path)
    page = page_path.read_text()
    assert page.count('<img src="data:image/png;base64,') == len(FIGURES)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert format_value("val_bpb", summary["val_bpb"]) in page
    assert f"{summary['val_bpb']:.4f}" in page and f"{summary['acr']:.3f}" in page
    assert "max_seq_len = 32" in page  # the resolved config
    for name, _ in FIGURES:
        assert (out_dir / name).read_bytes().startswith(PNG_MAGIC)


def test_report_out_dir(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "elsewhere"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    assert (out / "report.html").exists() and (out / "loss.png").exists()


def test_missing_run_dir_exits_2_naming_it(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "no-such-run"
    assert main(["report", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "Traceback" not in err


def test_missing_run_file_exits_2_naming_it(run_dir: Path, tmp_path: Path, capsys) -> None:
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "config.toml").write_text((run_dir / "config.toml").read_text())
    assert main(["report", str(partial)]) == 2
    assert str(partial / "summary.json") in capsys.readouterr().err


@pytest.mark.parametrize(
    ("n", "expected"),
    [(1, [0]), (4, [0, 1, 2, 3]), (6, list(range(6))), (11, [0, 2, 4, 6, 8, 10])],
)
def test_snapshot_indices_keep_first_and_last(n: int, expected: list[int]) -> None:
    picked = plots.snapshot_indices(n)
    assert picked == expected and picked[0] == 0 and picked[-1] == n - 1


def test_plots_without_matplotlib_say_how_to_install(monkeypatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(ValueError, match="pip install matplotlib"):
        plots.loss_curve([{"step": 1, "train_loss": 1.0}], tmp_path / "x.png")
