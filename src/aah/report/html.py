"""One self-contained HTML report for a run directory: figures inlined as base64 PNGs,
the summary.json numbers as a table, the context-use table when `aah eval --cut-windows`
saved one, and the resolved config.toml."""

from __future__ import annotations

import base64
import html
import tomllib
from pathlib import Path
from typing import Any

from aah import records
from aah.report import plots
from aah.report.glossary import describe

REPORT = "report.html"
#: (file name, caption) of each figure, in page order.
FIGURES = (
    ("loss.png", "Train and validation loss (nats/byte) against optimizer step"),
    (
        "coverage.png",
        "ACR (mean of min(w, T) / T) and causal coverage (allowed query-key pairs over full "
        "causal) over training",
    ),
    ("windows.png", "Per-layer x head windows over training"),
    ("final_windows.png", "Final window map"),
)
#: summary.json keys shown first, with their number format.
SUMMARY_FORMATS = {
    "val_loss": ".4f",
    "val_bpb": ".4f",
    "val_acc": ".3f",
    "acr": ".3f",
    "causal_coverage": ".3f",
    "executed_ratio": ".3f",
    "train_tokens_per_s": ",.0f",
    "peak_rss_mb": ",.0f",
}


def format_value(key: str, value: Any) -> str:
    """A summary value as the report shows it (floats to a fixed number of digits)."""
    if isinstance(value, dict):  # e.g. val_acc_by_distance
        return ", ".join(f"{k}: {format_value(key, v)}" for k, v in value.items())
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float):
        return format(value, SUMMARY_FORMATS.get(key, ".4g"))
    return format(value, ",") if key in SUMMARY_FORMATS else str(value)


def _require(path: Path) -> Path:
    if not path.exists():
        raise ValueError(f"{str(path)!r} does not exist (not a finished run directory?)")
    return path


def _seq_len(summary: dict[str, Any], config: dict[str, Any]) -> int:
    seq_len = summary.get("seq_len") or config.get("model", {}).get("max_seq_len")
    if not seq_len:
        raise ValueError("cannot tell the sequence length: no seq_len in summary.json or config")
    return int(seq_len)


def _summary_table(summary: dict[str, Any]) -> str:
    keys = [k for k in SUMMARY_FORMATS if k in summary]
    keys += [k for k in summary if k not in SUMMARY_FORMATS]
    rows = "\n".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(format_value(k, summary[k]))}</td>"
        f'<td class="def">{html.escape(describe(k))}</td></tr>'
        for k in keys
    )
    return f"<table>\n{rows}\n</table>"


def provenance_line(summary: dict[str, Any]) -> str:
    """Versions, commit and date the run recorded (older runs recorded none)."""
    keys = ("aah_version", "torch_version", "python_version", "git_commit", "date")
    if not any(summary.get(k) for k in keys):
        return "<p>Versions and commit: not recorded (the run predates that record).</p>"
    parts = [
        f"aah {summary.get('aah_version', '?')}",
        f"torch {summary.get('torch_version', '?')}",
        f"Python {summary.get('python_version', '?')}",
        f"commit {summary.get('git_commit') or 'unknown (not a git checkout)'}",
        f"finished {summary.get('date', '?')}",
    ]
    return f"<p>Trained with {html.escape(', '.join(parts))}.</p>"


def _cut_table(rows: list[dict[str, Any]]) -> str:
    """The context-use rows of cut_windows.json: bits/byte and recall accuracy per cut."""
    buckets = list(rows[0].get("val_acc_by_distance") or {}) if rows else []
    head = ["every head cut to", "bits/byte"] + (["recall", *buckets] if buckets else [])

    def pct(value: Any) -> str:
        return "n/a" if value is None else f"{100 * value:.1f}%"

    body = []
    for r in rows:
        cells = [str(r["cut"]), f"{r['val_bpb']:.4f}"]
        if buckets:
            by = r.get("val_acc_by_distance") or {}
            cells += [pct(r.get("val_acc")), *(pct(by.get(b)) for b in buckets)]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f"<table>\n<tr>{header}</tr>\n" + "\n".join(body) + "\n</table>"


def _figure(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption)}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 60em; }
table { border-collapse: collapse; } th, td { padding: 2px 10px; border-bottom: 1px solid #ddd; }
th { text-align: left; font-weight: normal; color: #555; } td { font-family: monospace; }
td.def { font-family: sans-serif; color: #555; font-size: 90%; }
figure { margin: 1.5em 0; } img { max-width: 100%; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; }
"""


def render_page(
    run_dir: Path, summary: dict[str, Any], config_text: str, figures: str, extra: str = ""
) -> str:
    """The whole page as one string; it refers to no other file. `extra`: HTML after the
    summary (the context-use table)."""
    title = html.escape(f"aah report: {run_dir.name}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{STYLE}</style></head>
<body>
<h1>{title}</h1>
<p>Run directory: <code>{html.escape(str(run_dir))}</code></p>
{provenance_line(summary)}
<h2>Summary</h2>
{_summary_table(summary)}
{extra}
<h2>Figures</h2>
{figures}
<h2>Resolved config</h2>
<pre>{html.escape(config_text)}</pre>
</body></html>
"""


def build_report(run_dir: Path, out_dir: Path | None = None) -> Path:
    """Write the figures and report.html for `run_dir` into `out_dir` (default RUN_DIR/report).

    Returns the path of report.html. A missing directory or run file raises ValueError naming it.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{str(run_dir)!r} is not a run directory")
    config_text = _require(run_dir / records.CONFIG).read_text(encoding="utf-8")
    try:
        config = tomllib.loads(config_text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{str(run_dir / records.CONFIG)!r}: {err}") from err
    summary = records.read_json(_require(run_dir / records.SUMMARY))
    metrics = records.read_jsonl(_require(run_dir / records.METRICS))
    plans = records.read_jsonl(_require(run_dir / records.PLANS))
    if not plans:
        raise ValueError(f"{str(run_dir / records.PLANS)!r} has no records")
    seq_len = _seq_len(summary, config)

    out_dir = Path(out_dir) if out_dir is not None else run_dir / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    (loss, _), (cov, _), (snaps, _), (final, _) = FIGURES
    plots.loss_curve(metrics, out_dir / loss)
    plots.coverage_curve(metrics, out_dir / cov)
    plots.window_snapshots(plans, seq_len, out_dir / snaps)
    plots.final_window_map(plans[-1]["windows"], seq_len, out_dir / final)

    shown = list(FIGURES)
    if any(r.get("val_acc_by_distance") for r in metrics):  # a generated task
        plots.recall_curve(metrics, out_dir / "recall.png")
        shown.append(("recall.png", "Recall accuracy at the answer bytes, by distance"))
    extra = ""
    cut_file = run_dir / "cut_windows.json"
    if cut_file.exists():  # written by `aah eval RUN_DIR --cut-windows ...`
        cut_rows = records.read_json(cut_file)
        plots.cut_window_curve(cut_rows, out_dir / "context_use.png")
        shown.append(("context_use.png", "Quality with every head cut to w at test time"))
        extra = "<h2>Context use (every head cut to w at test time)</h2>\n" + _cut_table(cut_rows)
    figures = "\n".join(_figure(out_dir / name, caption) for name, caption in shown)
    path = out_dir / REPORT
    page = render_page(run_dir, summary, config_text, figures, extra)
    records.write_text_atomic(path, page)
    return path
