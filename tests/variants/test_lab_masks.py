"""`aah lab masks` on tiny sizes: its counts against brute-force counts made here."""

from __future__ import annotations

import argparse
import re

import pytest

from aah.cli.lab_cmd import add_lab_arguments, run_lab


def _run(argv: list[str], capsys) -> str:  # type: ignore[no-untyped-def]
    parser = argparse.ArgumentParser()
    add_lab_arguments(parser.add_subparsers(dest="command"))
    assert run_lab(parser.parse_args(["lab", *argv])) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("n", "w"), [(9, 3), (12, 1), (7, 20)])
def test_lab_masks_counts_match_brute_force(n: int, w: int, capsys) -> None:  # type: ignore[no-untyped-def]
    args = ["masks", "--seq-len", str(n), "--window", str(w), "--heads", "2", "--head-dim", "4"]
    out = _run([*args, "--warmup", "1", "--reps", "2", "--batch", "2"], capsys)
    full = sum(1 for i in range(n) for j in range(n) if j <= i)
    local = sum(1 for i in range(n) for j in range(n) if j <= i and i - j < w)
    assert re.search(rf"full causal: {full} \(formula n\(n\+1\)/2 = {full}\)", out)
    assert re.search(rf"local window: {local} \(formula .* = {local};", out)
    assert "above the diagonal that are nonzero: 0 " in out
    corner = [line for line in out.splitlines() if line.startswith("  ") and "inf" in line]
    assert corner[0].split()[0] == "0" and corner[0].split()[1] == "-inf"
    for key in ("device=cpu", f"seq_len={n}", "batch=2", "dtype=float32", "warmup=1"):
        assert key in out
    assert re.search(r"full causal \(SDPA is_causal\): [0-9.]+ ms", out)


def test_lab_masks_rejects_bad_window(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="--window"):
        _run(["masks", "--seq-len", "8", "--window", "0"], capsys)
