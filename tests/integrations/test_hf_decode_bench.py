"""`aah bench hf-decode` at tiny sizes: rows, byte formula, the plan it builds, flag errors."""

from __future__ import annotations

import json

import pytest

from aah.attention import coverage
from aah.bench.hf_decode import kv_plan_for_coverage
from aah.cli import main

pytest.importorskip("transformers.cache_utils", reason="needs layered caches")

TINY = ["--layers", "2", "--d-model", "64", "--heads", "4", "--kv-heads", "2", "--vocab", "64"]


def test_smoke_rows_stream_and_end_in_json(capsys) -> None:
    argv = ["bench", "hf-decode", "--seq-lens", "48,80", "--batch-size", "1", "--batch-size",
            "2", "--new-tokens", "2", "--reps", "2", "--warmup", "1", "--window", "8",
            "--sinks", "2", "--coverage", "0.5", "--threads", "1", "--json", *TINY]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["benchmark"] == "hf-decode" and result["env"]["threads"] == 1
    rows = result["rows"]
    assert [(r["seq_len"], r["batch"], r["cache"]) for r in rows] == [
        (t, b, c) for t in (48, 80) for b in (1, 2) for c in ("per-head", "dynamic")
    ]
    assert all(r["formula_ok"] for r in rows)
    for head, full in zip(rows[::2], rows[1::2], strict=True):
        assert head["causal_coverage"] <= 0.5 and full["causal_coverage"] == 1.0
        assert head["kv_bytes"] < full["kv_bytes"] and head["kv_ratio"] < 1.0
        assert head["decode_tokens_per_s"] > 0 and full["decode_speedup"] == 1.0
    assert "warm-up" in lines[0] and "threads 1" in lines[0]
    assert len(lines) == 2 + len(rows) + 1  # the setting, a header, one line per row, JSON


def test_plan_shares_windows_within_kv_heads_under_the_coverage_cap() -> None:
    plan = kv_plan_for_coverage(4, 8, 2, 16384, 16500, 0.2, 512, 4)
    assert all(len(set(row[g * 4 : (g + 1) * 4])) == 1 for row in plan for g in range(2))
    assert coverage(plan, 16384, 4).causal <= 0.2
    assert sum(row.count(16500) for row in plan) == 4  # one KV head of eight is full
    assert kv_plan_for_coverage(2, 4, 2, 64, 70, 1.0, 8, 0) == [[70] * 4] * 2


def test_bad_flags_name_the_value(capsys) -> None:
    assert main(["bench", "hf-decode", "--batch-size", "0", *TINY]) == 2
    assert "--batch-size" in capsys.readouterr().err
    assert main(["bench", "hf-decode", "--heads", "4", "--kv-heads", "3"]) == 2
    assert "--kv-heads 3" in capsys.readouterr().err
    assert main(["bench", "hf-decode", "--coverage", "1.5"]) == 2
    assert "got 1.5" in capsys.readouterr().err


def test_a_plan_file_is_scaled_to_each_context_and_held_exactly(tmp_path, capsys) -> None:
    from aah.bench.hf_decode import plan_at
    from aah.plan import WindowPlan

    plan = [[8, 8, 32, 32], [16, 16, 4, 4]]  # searched at T = 32: heads at 32 saw everything
    path = tmp_path / "plan.json"
    WindowPlan.of(plan, 2, 32).save(path)
    scaled = plan_at(str(path), 64, 70, None)
    assert scaled.windows == [[16, 16, 70, 70], [32, 32, 8, 8]]
    assert scaled.sinks == [[2] * 4] * 2  # the file's own sinks travel with it
    assert plan_at(str(path), 64, 70, 3).sinks == [[3] * 4] * 2  # unless --sinks says otherwise
    bare = tmp_path / "bare.json"
    WindowPlan.of(plan).save(bare)
    assert plan_at(str(bare), 64, 70, None).windows == plan  # no seq_len recorded: as it is
    argv = ["bench", "hf-decode", "--seq-lens", "32,64", "--batch-size", "1", "--new-tokens",
            "2", "--reps", "1", "--warmup", "0", "--plan", str(path),
            "--threads", "1", "--json", *TINY]  # fmt: skip
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert all(r["formula_ok"] for r in rows)  # the cache holds what the scaled plan says
    per_head = [r for r in rows if r["cache"] == "per-head"]
    assert per_head[0]["kv_ratio"] == pytest.approx(per_head[1]["kv_ratio"], abs=0.05)
