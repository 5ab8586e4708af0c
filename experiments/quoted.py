"""Numbers the docs quote from a report, checked against the report's own text.

The README and docs quote estimates as `mean [low, high]` (a difference with its 95%
interval) and `mean ± sd`, and Holm-adjusted p-values as `Holm p 0.21` (in prose, or in a
table column headed `Holm p`). Each such quote must be what some generated report prints: the
suite reports (results/REPORT.md), the post-hoc tables (results/posthoc*/posthoc.md) and the
pretrained tables (results/pretrained/*/table.md), to the digits the quote prints (a report's
+0.0296 [-0.0329, +0.0922] is quoted correctly as +0.030 [-0.033, +0.092], and not as
+0.031 [...]). A quote is matched as a whole (the mean with its interval, or with its sd),
which a wrong digit anywhere breaks, and which a coincidence among the reports' thousands of
numbers is unlikely to satisfy.

`unmatched(docs, reports)` lists every quote no report holds; `experiments/tests/test_quoted.py`
runs it over the project's own docs, so a number edited by hand or left behind by a rerun
fails CI.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

_NUM = r"[+\-−]?\d+\.\d+"
#: `mean [low, high]`: the interval right after the mean, or in a table the mean's cell, at
#: most one cell between (a report's sd), then the interval's cell
INTERVAL = re.compile(rf"({_NUM}) (?:\| (?:{_NUM} \| )?)?\[({_NUM}), ({_NUM})\]")
#: `mean ± sd`
PLUS_MINUS = re.compile(rf"({_NUM}) ± ({_NUM})")
#: a Holm-adjusted p in prose: `Holm p 0.21`, `Holm p of 0.44` (not `< 1e-4`: no digits)
HOLM = re.compile(r"Holm p(?: of)? (\d+\.\d+)")
#: a number alone in a table cell, bold or not
CELL_NUMBER = re.compile(r"\**(\d+\.\d+)\**")

#: where the docs' quotes come from, relative to the project root
REPORT_GLOBS = (
    "results/REPORT.md", "results/posthoc*/posthoc.md", "results/pretrained/*/table.md",
    "results/pretrained/*/*/table.md",
    "results/hf-peer/peer.md",
)  # fmt: skip
#: runs whose numbers live in JSON only (`json_quotes`)
JSON_GLOBS = ("results/pretrained/*.json",)
#: the documents whose quotes are checked
DOC_GLOBS = ("README.md", "docs/*.md")


@dataclass(frozen=True)
class Quote:
    """One quoted estimate: where it is and its numbers as printed."""

    path: str
    line: int
    text: str
    numbers: tuple[str, ...]


def json_quotes(path: Path, name: str = "") -> list[Quote]:
    """The estimates of a results JSON's `rows`, as a report would print them: each row's
    `vs_uniform` with its `ci` (a list of rows, the pretrained runs), or each named row's
    `spearman` with its `interval` (a mapping, the signal-fidelity benchmark)."""
    import json

    rows = json.loads(path.read_text(encoding="utf-8")).get("rows", [])
    named = rows.items() if isinstance(rows, dict) else ((r.get("method"), r) for r in rows)
    out = []
    for label, row in named:
        for mean, interval in (("vs_uniform", "ci"), ("spearman", "interval")):
            if mean in row and interval in row:
                numbers = tuple(f"{x:+.4f}" for x in (row[mean], *row[interval]))
                out.append(Quote(name, 0, str(label), numbers))
    return out


def _number(text: str) -> float:
    return float(text.replace("−", "-"))


def _decimals(text: str) -> int:
    return len(text.split(".")[1])


def quotes(text: str, path: str = "") -> list[Quote]:
    """Every `mean [low, high]` and `mean ± sd` in `text`, in order; bold marks are read
    through (`**-0.03** [-0.05, -0.01]` is the quote -0.03 [-0.05, -0.01])."""
    out = []
    for number, line in enumerate(text.replace("**", "").splitlines(), 1):
        for pattern in (INTERVAL, PLUS_MINUS):
            for m in pattern.finditer(line):
                out.append(Quote(path, number, m.group(0), m.groups()))
    return out


def holm_quotes(text: str, path: str = "") -> list[Quote]:
    """Every Holm-adjusted p in `text` (one-number quotes): in prose, and each plain number in
    a markdown table column headed `Holm p`."""
    out = []
    column: int | None = None
    for number, line in enumerate(text.splitlines(), 1):
        out += [Quote(path, number, m.group(0), m.groups()) for m in HOLM.finditer(line)]
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "Holm p" in cells:
            column = cells.index("Holm p")
        elif (
            column is not None
            and column < len(cells)
            and (m := CELL_NUMBER.fullmatch(cells[column]))
        ):
            out.append(Quote(path, number, cells[column], m.groups()))
    return out


def _same(quoted: Sequence[str], printed: Sequence[str]) -> bool:
    """`quoted` is `printed` rounded to the quote's digits, number by number: the value the
    report printed (itself rounded) and the quote are within half a unit of the quote's last
    digit plus half of the report's (a report's 0.1305 may have been 0.13046 or 0.13054, so
    0.130 and 0.131 both quote it); the report printed at least as many digits."""
    for q, p in zip(quoted, printed, strict=True):
        digits, shown = _decimals(q), _decimals(p)
        if shown < digits:
            return False
        slack = 0.5 * 10.0**-digits + 0.5 * 10.0**-shown + 1e-12
        if abs(_number(p) - _number(q)) > slack:
            return False
    return True


def unmatched(docs: Iterable[Quote], reports: Iterable[Quote]) -> list[Quote]:
    """The doc quotes that no report quote of the same form prints (to the quote's digits)."""
    by_form: dict[int, list[tuple[str, ...]]] = {}
    for r in reports:
        by_form.setdefault(len(r.numbers), []).append(r.numbers)
    return [
        d for d in docs if not any(_same(d.numbers, r) for r in by_form.get(len(d.numbers), []))
    ]


def check_project(root: Path) -> list[Quote]:
    """`unmatched` over the project's docs and reports under `root`."""

    def read(globs: Sequence[str]) -> list[Quote]:
        found = []
        for pattern in globs:
            for path in sorted(root.glob(pattern)):
                text, name = path.read_text(encoding="utf-8"), str(path.relative_to(root))
                found += quotes(text, name) + holm_quotes(text, name)
        return found

    reports = read(REPORT_GLOBS)
    for pattern in JSON_GLOBS:
        for path in sorted(root.glob(pattern)):
            reports += json_quotes(path, str(path.relative_to(root)))
    return unmatched(read(DOC_GLOBS), reports)
