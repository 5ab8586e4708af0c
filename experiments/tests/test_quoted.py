"""Every estimate the README and docs quote is one a generated report prints."""

from __future__ import annotations

from pathlib import Path

from experiments.quoted import check_project, holm_quotes, quotes, unmatched

ROOT = Path(__file__).resolve().parents[2]


def test_every_quoted_estimate_in_the_docs_is_printed_by_a_report() -> None:
    bad = check_project(ROOT)
    listing = "\n".join(f"{q.path}:{q.line}: {q.text}" for q in bad)
    assert not bad, f"quoted in the docs but printed by no report:\n{listing}"


def test_a_quote_matches_its_report_at_the_quoted_digits_only() -> None:
    report = quotes(
        "| `budget` | `budget-shuffled` | 0.30 | 5 | -0.0771 | [-0.1315, -0.0228] | 5/5 |\n"
        "| `budget` | -0.0079 | 0.0085 | [-0.0184, +0.0027] | -2.07 |\n"
        "ends at 1.3587 ± 0.0125 bits/byte\n"
    )
    assert [q.numbers for q in report] == [
        ("-0.0771", "-0.1315", "-0.0228"), ("-0.0079", "-0.0184", "+0.0027"),
        ("1.3587", "0.0125"),
    ]  # fmt: skip
    good = quotes("Δ -0.077 [-0.131, -0.023]; -0.008 [-0.018, +0.003]; 1.359 ± 0.013; "
                  "-0.0771 [-0.1315, -0.0228]")  # fmt: skip
    assert unmatched(good, report) == []
    wrong = quotes(
        "-0.078 [-0.131, -0.023]; -0.077 [-0.131, -0.024]; -0.008 [-0.018, -0.003]; "
        "1.358 ± 0.013; 0.077 [0.023, 0.131]; -0.07710 [-0.13150, -0.02280]"
    )
    assert unmatched(wrong, report) == wrong  # a digit, a sign, or more digits than printed


def test_a_quoted_holm_p_must_be_one_a_report_prints() -> None:
    report = holm_quotes(
        "| regime | p | Holm p | verdict |\n|---|---|---|---|\n| `budget` | 0.021 | 0.210 | x |\n"
        "\nundecided (Holm p 0.68 over the pairs)\n"
    )
    assert [q.numbers for q in report] == [("0.210",), ("0.68",)]  # the p column is not read
    good = holm_quotes("Holm p 0.21; Holm p of 0.210; Holm p 0.68; Holm p < 1e-4")
    assert len(good) == 3 and unmatched(good, report) == []
    stale = holm_quotes("Holm p 0.189; Holm p 0.021; Holm p 0.6")
    assert unmatched(stale, report) == stale


def test_bold_marks_are_read_through_in_docs_and_reports() -> None:
    report = quotes("| **-0.0320** [-0.0545, -0.0095] |")
    assert [q.numbers for q in report] == [("-0.0320", "-0.0545", "-0.0095")]
    assert not unmatched(quotes("**-0.032 [-0.055, -0.010]**"), report)
    assert unmatched(quotes("**-0.032** [-0.053, -0.010]"), report)  # a wrong digit under bold
