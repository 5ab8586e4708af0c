"""What `aah plan search` and `aah plan apply` print: one window per KV head and layer (not per
query head), the full cache's bytes and the share kept, what causal coverage and KV share
mean, how many blocks and tokens were scored, and a note when the plan cuts nothing."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from choice_rule import expected_choice
from hf_tokenized import TEXT, save_tokenized_llama

from aah.cli import main
from aah.cli.hf.plan_run import MEANINGS
from aah.integrations.hf.run.load import load_model
from aah.integrations.hf.search.plan_search import search_plan
from aah.plan import WindowPlan


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("output")
    save_tokenized_llama(root / "llama", seed=1)
    (root / "text.txt").write_text(TEXT)
    return root


def search(inputs, tmp_path, capsys, *flags: str):  # type: ignore[no-untyped-def]
    capsys.readouterr()
    argv = ["plan", "search", str(inputs / "llama"), "--text", str(inputs / "text.txt"),
            "--out", str(tmp_path / "plan.json"), "--seq-len", "32", "--max-batches", "2",
            "--candidates", "4,8,16,32", "--sinks", "1", "--threads", "1", "--no-choose",
            *flags]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return lines, json.loads(lines[-1])


def test_the_search_reports_per_kv_head_and_against_the_full_cache(inputs, tmp_path, capsys):
    lines, summary = search(inputs, tmp_path, capsys, "--heatmap", str(tmp_path / "plan.png"))
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert (tmp_path / "plan.png").stat().st_size > 0
    rows = [line for line in lines if line.startswith("  layer")]
    assert len(rows) == 2  # layers
    for row, windows in zip(rows, plan["windows"], strict=True):
        assert row.split(":")[1].split() == [str(w) for w in windows[::2]]  # 2 KV heads of 2
        assert windows[0] == windows[1] and windows[2] == windows[3]
    full = 2 * 2 * 32 * 16 * 2 * 4  # layers x KV heads x T x head_dim x (k, v) x fp32
    assert summary["kv_bytes_full"] == full
    assert summary["kv_share"] == pytest.approx(plan["kv_bytes"] / full)
    assert f"of the full cache's {full / 2**20:.3f} MB" in lines[0]
    assert MEANINGS in lines and "causal coverage:" in MEANINGS and "KV share:" in MEANINGS
    assert not any(line.startswith("note:") for line in lines)
    model, tokenizer = load_model(str(inputs / "llama"), "cpu")
    again = search_plan(model, TEXT, 0.3, seq_len=32, max_batches=2, candidates=[4, 8, 16, 32],
                        sinks=1, tokenizer=tokenizer)  # fmt: skip
    assert again.windows == plan["windows"]  # the CLI searched the Python API's plan


def test_a_plan_that_cuts_nothing_is_announced(inputs, tmp_path, capsys):
    lines, summary = search(inputs, tmp_path, capsys, "--budget", "1.0")
    assert summary["coverage"] == 1.0
    assert "note: every head keeps its whole context at T=32: the budget cuts nothing" in lines


def test_apply_says_what_it_scored(inputs, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    WindowPlan.of([[8] * 4] * 2, 1, 32).save(plan)
    capsys.readouterr()
    argv = ["plan", "apply", str(inputs / "llama"), "--text", str(inputs / "text.txt"),
            "--plan", str(plan), "--batch-size", "2", "--max-batches", "3",
            "--threads", "1"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert (result["blocks"], result["tokens"], result["seq_len"]) == (6, 6 * 32, 32)
    assert f"scoring 6 blocks of T=32 tokens (192 tokens) of {inputs / 'text.txt'}" in lines
    assert MEANINGS in lines


def test_without_text_the_search_calibrates_on_the_shipped_mix(inputs, tmp_path, capsys):
    argv = ["plan", "search", str(inputs / "llama"), "--out", str(tmp_path / "plan.json"),
            "--seq-len", "32", "--max-batches", "2", "--candidates", "4,8,16,32",
            "--sinks", "1", "--threads", "1", "--no-choose"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "calibrating on the shipped mix: 2 blocks of 32 tokens" in lines
    plan = json.loads((tmp_path / "plan.json").read_text())
    model, _ = load_model(str(inputs / "llama"), "cpu")
    again = search_plan(model, None, 0.3, seq_len=32, max_batches=2, candidates=[4, 8, 16, 32],
                        sinks=1, choose=False)  # fmt: skip
    assert plan["signal"] == "output" and again.windows == plan["windows"]


def test_whole_layers_from_the_command_line(inputs, tmp_path, capsys):
    _, summary = search(inputs, tmp_path, capsys, "--budget", "0.8", "--whole-layers", "0")
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["windows"][0] == [32] * 4 and plan["whole_layers"] == [0]
    assert summary["coverage"] <= 0.8


def test_the_search_chooses_end_to_end_and_says_so(inputs, tmp_path, capsys):
    capsys.readouterr()
    argv = ["plan", "search", str(inputs / "llama"), "--out", str(tmp_path / "plan.json"),
            "--seq-len", "32", "--max-batches", "2", "--candidates", "4,8,16,32",
            "--kv-fraction", "0.5", "--threads", "1"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    said = "calibrating on the shipped mix: 2 blocks of 32 tokens, and 4 more to judge plans on"
    assert said in lines
    plan = json.loads((tmp_path / "plan.json").read_text())
    chosen = plan["choice"]["chosen"]
    assert json.loads(lines[-1])["chosen"] == chosen == expected_choice(plan["choice"])
    shown = [line for line in lines if line.startswith("  * ")]
    assert len(shown) == 1 and shown[0].endswith(chosen)


def test_the_command_line_says_when_one_window_is_kept_by_the_margin(
    inputs, tmp_path, capsys, monkeypatch
):
    import aah.integrations.hf.search.search_choice as search_choice

    monkeypatch.setattr(search_choice, "CHOICE_MARGIN", 0.999)  # no plan leads by that much
    capsys.readouterr()
    argv = ["plan", "search", str(inputs / "llama"), "--out", str(tmp_path / "plan.json"),
            "--seq-len", "32", "--max-batches", "2", "--candidates", "4,8,16,32",
            "--kv-fraction", "0.4", "--threads", "1"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    choice = json.loads((tmp_path / "plan.json").read_text())["choice"]
    lowest = next(iter(choice["scores"]))
    assert not lowest.startswith("uniform"), "the margin needs a plan ahead to decide on"
    assert choice["chosen"].startswith("uniform") and choice["margin"] == 0.999
    assert f"one window kept: {lowest!r} leads it by" in out


def test_refine_from_the_command_line_is_the_apis_refined_plan(inputs, tmp_path, capsys):
    argv = ["plan", "search", str(inputs / "llama"), "--text", str(inputs / "text.txt"),
            "--out", str(tmp_path / "plan.json"), "--seq-len", "32", "--max-batches", "4",
            "--candidates", "4,8,16,32", "--threads", "1", "--refine"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    plan = WindowPlan.load(tmp_path / "plan.json")
    assert summary["refined"] == [move for move, _ in plan.info["refine"]["steps"][1:]]
    model, tokenizer = load_model(str(inputs / "llama"), "cpu")
    again = search_plan(model, TEXT, 0.3, seq_len=32, max_batches=4, candidates=[4, 8, 16, 32],
                        refine=True, tokenizer=tokenizer)  # fmt: skip
    assert again.windows == plan.windows and again.info["refine"] == plan.info["refine"]
    assert main([*argv, "--no-choose"]) == 2
    assert "--refine judges plans on the choice's held-out blocks" in capsys.readouterr().err


def test_the_objective_and_several_signals_from_the_command_line(tmp_path, capsys):
    folder = tmp_path / "llama"
    save_tokenized_llama(folder, seed=1, max_position_embeddings=256)
    argv = ["plan", "search", str(folder), "--out", str(tmp_path / "plan.json"),
            "--seq-len", "128", "--max-batches", "2", "--candidates", "16,32,64,128",
            "--kv-fraction", "0.5", "--threads", "1", "--sinks", "0",
            "--signal", "output,mass", "--objective", "text+retrieval"]  # fmt: skip
    assert main(argv) == 0
    choice = json.loads((tmp_path / "plan.json").read_text())["choice"]
    assert choice["retrieval_probes"] == 8
    assert {"output, sinks 0", "mass, sinks 0", "uniform, sinks 0"} <= set(choice["scores"])
    capsys.readouterr()
    assert main([*argv, "--no-choose"]) == 2
    assert "--objective and several --signal names judge candidate plans" in capsys.readouterr().err
    assert main([*argv[:-3], "output,nope"]) == 2
    assert "got 'nope'" in capsys.readouterr().err
