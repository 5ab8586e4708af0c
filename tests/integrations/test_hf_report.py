"""Perplexity, the budget sweep, the heatmap, and the CLI command logic on tiny HF models."""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch
from hf_models import VOCAB, tiny_model

from aah.cli.hf import plan_args
from aah.integrations import hf
from aah.integrations.hf.search.sweep import (
    budget_sweep,
    perplexity,
    sweep_json,
    sweep_table,
)
from aah.plan import WindowPlan
from aah.report.plan_heatmap import save_heatmap

TEXT = "def f(x):\n    return x * 2  # doubles\n" * 12  # bytes stand-in: ~500 tokens


def test_perplexity_matches_the_models_own_loss() -> None:
    model = tiny_model("qwen3")
    ids = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss = model(ids, labels=ids).loss
    assert perplexity(model, [ids]) == pytest.approx(math.exp(float(loss)), rel=1e-5)


def test_budget_sweep_rows() -> None:
    model = tiny_model("llama")
    budgets = [0.2, 0.5, 0.8]
    rows = budget_sweep(model, TEXT[:300], TEXT[300:], budgets, seq_len=32, sample_queries=16)
    assert [r.budget for r in rows] == budgets
    for r in rows:
        assert r.coverage <= r.budget
        assert r.ppl > 1 and r.ppl_full > 1
        assert r.delta_pct == pytest.approx(100 * (r.ppl / r.ppl_full - 1))
    assert rows[0].lost_mass >= rows[-1].lost_mass  # a larger budget keeps more mass
    assert len({r.ppl_full for r in rows}) == 1
    assert hf.current_plan(model) is None  # left as it was
    assert sweep_table(rows).count("\n") == len(rows)
    assert json.loads(sweep_json(rows))["rows"][1]["budget"] == 0.5


def test_heatmap_png(tmp_path) -> None:
    import matplotlib  # noqa: F401  (a dev dependency: the heatmap must be tested)

    path = tmp_path / "plan.png"
    save_heatmap([[4, 8, 16], [32, 64, 1]], path, title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _parse(add, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add(parser)
    return parser.parse_args(argv)


def test_cli_search_then_apply(tmp_path, capsys) -> None:
    model_dir = tmp_path / "model"
    tiny_model("gpt2").save_pretrained(model_dir)
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out, png = tmp_path / "plan.json", tmp_path / "plan.png"
    args = _parse(
        plan_args.add_plan_search_arguments,
        [
            str(model_dir),
            "--budget",
            "0.3",
            "--text",
            str(text),
            "--out",
            str(out),
            "--heatmap",
            str(png),
            "--seq-len",
            "32",
            "--max-batches",
            "2",
            "--heldout",
            str(text),
            "--sweep-budgets",
            "0.3,0.6",
        ],
    )
    assert plan_args.run_plan_search(args) == 0
    plan = WindowPlan.load(out)
    assert (
        plan.info["model"] == "GPT2LMHeadModel"
        and plan.seq_len == 32
        and plan.info["coverage"] <= 0.3
    )
    assert png.exists()
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["budget"] for r in summary["sweep"]] == [0.3, 0.6]

    args = _parse(
        plan_args.add_plan_apply_arguments,
        [str(model_dir), "--plan", str(out), "--text", str(text), "--max-batches", "2"],
    )
    assert plan_args.run_plan_apply(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["seq_len"] == 32 and result["coverage"] == pytest.approx(plan.info["coverage"])
    assert result["ppl_plan"] != result["ppl_full"]
    assert lines[0].startswith("scoring 2 blocks of T=32 tokens")
    assert lines[1].startswith("perplexity without plan")


def test_cli_refuses_a_missing_text_file(tmp_path) -> None:
    args = _parse(
        plan_args.add_plan_apply_arguments,
        [str(tmp_path), "--plan", "p.json", "--text", str(tmp_path / "none.txt")],
    )
    with pytest.raises(ValueError, match="does not exist"):
        plan_args.run_plan_apply(args)
    (tmp_path / "none.txt").write_text(TEXT)
    with pytest.raises(ValueError, match="plan file"):
        plan_args.run_plan_apply(args)
