"""The parts of `experiments.scripts.ruler_kvpress` that need no kvpress (it runs in its own
environment): the press names, the compression ratio at equal bytes, the folder, fraction and
sample checks, and the report's `kvpress-*` columns read from the same cells file."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.pretrained.cells import CellStore
from experiments.ruler.report import labels, peer_methods, peer_shares, summarize
from experiments.scripts import ruler_kvpress as rk

SETTINGS = {"model": "m.gguf", "seq_len": 64, "seed": 0, "template": "raw", "kv_fraction": 0.3}


def sample_row(task: str, index: int, context: int = 40, **changes: object) -> dict:
    row = {"task": task, "index": index, "input_ids": list(range(50)), "context_tokens": context,
           "answers": ["7"], "metric": "string_match_all", "tokens_to_generate": 8,
           "answer_prefix": " Answer:", "haystack_size": 3, "seq_len": 64, "seed": 0,
           "template": "raw"}  # fmt: skip
    return {**row, **changes}


def run_folder(tmp_path: Path, rows: list[dict]) -> Path:
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    CellStore(tmp_path / "cells.jsonl", SETTINGS)
    return tmp_path


def test_presses_are_checked_by_name_with_full_first() -> None:
    assert rk.parse_presses("snapkv,streaming,snapkv") == ["full", "snapkv", "streaming"]
    assert rk.parse_presses("streaming,full") == ["full", "streaming"]
    with pytest.raises(ValueError, match="unknown press 'knorm'"):
        rk.parse_presses("snapkv,knorm")
    with pytest.raises(ValueError, match="unknown press 'h2o'"):
        rk.make_press("h2o", 0.5)
    assert rk.make_press("full", 0.7) is None


def test_the_ratio_is_one_minus_the_fraction_without_sliding_layers() -> None:
    assert rk.press_ratio(0.3, 1000, 1000) == 0.7
    assert rk.press_ratio(1.0, 1000, 1000) == 0.0


def test_the_ratio_holds_the_fraction_of_a_sliding_models_own_cache() -> None:
    # Gemma 3 270M at a 2000-token context: 3 global layers hold it all, 15 sliding ones 511
    context, per_position = 2000, 1024
    full = (3 * context + 15 * 511) * per_position
    plain = 18 * context * per_position  # kvpress's DynamicCache: every layer holds it all
    r = rk.press_ratio(0.3, full, plain)
    assert 0.88 < r < 0.89
    held = 18 * int(context * (1 - r)) * per_position  # what the press then keeps
    assert held / full == pytest.approx(0.3, abs=1e-3)


def test_sliding_layers_are_noted() -> None:
    gemma = SimpleNamespace(layer_types=["sliding_attention"] * 5 + ["full_attention"],
                            sliding_window=512)  # fmt: skip
    assert rk.sliding_note(gemma).startswith("note: 5 of 6 layers slide over 512 positions")
    assert rk.sliding_note(SimpleNamespace(layer_types=["full_attention"] * 2)) is None
    assert rk.sliding_note(SimpleNamespace()) is None


def test_bad_fractions_and_bytes_are_refused() -> None:
    for fraction in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="--kv-fraction must be in"):
            rk.press_ratio(fraction, 10, 10)
    with pytest.raises(ValueError, match="bad cache bytes"):
        rk.press_ratio(0.3, 10, 5)
    assert rk.check_fraction(None, SETTINGS) == 0.3
    assert rk.check_fraction(0.3, SETTINGS) == 0.3
    with pytest.raises(ValueError, match=r"--kv-fraction 0\.5 differs"):
        rk.check_fraction(0.5, SETTINGS)


def test_a_folder_without_samples_or_settings_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"holds no samples\.jsonl"):
        rk.read_settings(tmp_path)
    (tmp_path / "samples.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"holds no cells\.jsonl"):
        rk.read_settings(tmp_path)
    (tmp_path / "cells.jsonl").write_text('{"key": "full/fwe/0", "value": {}}\n')
    with pytest.raises(ValueError, match="no settings line"):
        rk.read_settings(tmp_path)


def test_samples_come_in_the_runners_order_and_are_checked(tmp_path: Path) -> None:
    rows = [sample_row(t, i) for t in ("niah_single_1", "fwe") for i in range(3)]
    out = run_folder(tmp_path, rows)
    settings = rk.read_settings(out)
    assert settings == SETTINGS
    chosen = rk.chosen_samples(out, settings, None, 2)
    assert [(s.task, s.index) for s in chosen] == [
        ("niah_single_1", 0), ("fwe", 0), ("niah_single_1", 1), ("fwe", 1),
    ]  # fmt: skip
    assert [s.task for s in rk.chosen_samples(out, settings, "fwe", None)] == ["fwe"] * 3
    with pytest.raises(ValueError, match="task 'vt' has no samples"):
        rk.chosen_samples(out, settings, "vt", None)
    with pytest.raises(ValueError, match="--samples must be >= 1"):
        rk.chosen_samples(out, settings, None, 0)
    with pytest.raises(ValueError, match="--samples 4: niah_single_1 has 3 in"):
        rk.chosen_samples(out, settings, None, 4)


def test_samples_made_otherwise_or_without_a_question_are_refused(tmp_path: Path) -> None:
    out = run_folder(tmp_path, [sample_row("fwe", 0, seq_len=128)])
    with pytest.raises(ValueError, match="was made for"):
        rk.chosen_samples(out, SETTINGS, None, None)
    out = run_folder(tmp_path, [sample_row("fwe", 0, context=50)])
    with pytest.raises(ValueError, match="context_tokens 50 out of range"):
        rk.chosen_samples(out, SETTINGS, None, None)


def test_a_press_cell_records_its_ratio_and_shares() -> None:
    full = {"kv_bytes": 1000, "plain_kv_bytes": 2000}
    cell = {"kv_bytes": 2000, "attended_bytes": 300, "score": 1.0}
    made = rk.press_cell(cell, full, 0.85)
    assert made["kv_fraction"] == 2.0 and made["attended_fraction"] == 0.3
    assert made["compression_ratio"] == 0.85 and made["frees_memory"] is False
    assert rk.press_cell({**cell, "kv_bytes": 300}, full, 0.85)["frees_memory"] is True


def test_the_report_shows_kvpress_cells_beside_the_projects_methods(tmp_path: Path) -> None:
    cells = CellStore(tmp_path / "cells.jsonl", SETTINGS)
    samples = [SimpleNamespace(task="fwe", index=i, input_ids=[0] * 10) for i in range(2)]
    for s in samples:
        cells.put(f"full/fwe/{s.index}", {"score": 1.0, "seconds": 1.0})
        for name, share in (("kvpress-full", 1.0), ("kvpress-snapkv", 0.29)):
            cells.put(f"{name}/fwe/{s.index}", {"score": 0.5, "seconds": 2.0,
                                                "kv_fraction": share})  # fmt: skip
    cells.put("search_seconds", 3.0)
    peers = peer_methods(cells)
    assert peers == ["kvpress-full", "kvpress-snapkv"]
    methods = ["full", *peers]
    assert peer_shares(samples, cells, methods, peers) == {
        "kvpress-full": 1.0, "kvpress-snapkv": pytest.approx(0.29),
    }  # fmt: skip
    summary = summarize(samples, cells, methods)
    assert summary["per_task"]["kvpress-snapkv"]["fwe"].mean == 50.0


def test_presses_that_answered_fewer_samples_get_a_table_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from experiments.ruler import report

    cells = CellStore(tmp_path / "cells.jsonl", SETTINGS)
    samples = [SimpleNamespace(task="fwe", index=i, input_ids=[0] * 10, answers=["a"])
               for i in range(4)]  # fmt: skip
    for s in samples:  # full right on samples 1-3; the press ran on the first two only
        cells.put(f"full/fwe/{s.index}", {"score": 1.0 if s.index else 0.0, "seconds": 1.0})
    for i in range(2):
        cells.put(f"kvpress-snapkv/fwe/{i}", {"score": 0.5, "seconds": 2.0, "kv_fraction": 0.3})
    args = SimpleNamespace(out=tmp_path / "report", seq_len=10, template="raw",
                           kv_fraction=0.3, seed=0)  # fmt: skip
    # full attention alone needs no model for its KV share
    monkeypatch.setattr(report, "kv_shares", lambda plans, model, seq_len: {"full": 1.0})
    results = report.write_report(args, samples, cells, {"full": None}, model=None)
    assert results["scores"]["full"]["fwe"]["n"] == 4
    assert results["scores"]["full"]["fwe"]["mean"] == 75.0
    joint = results["with_peers"]
    assert joint["scores"]["full"]["fwe"]["n"] == 2
    assert joint["scores"]["full"]["fwe"]["mean"] == 50.0
    assert joint["scores"]["kvpress-snapkv"]["fwe"]["mean"] == 50.0
    assert joint["kv_share"]["kvpress-snapkv"] == pytest.approx(0.3)
    text = (tmp_path / "report" / "table.md").read_text()
    assert text.count("| task | samples |") == 2
    assert "on the samples every method answered" in text


def test_plan_columns_are_named_by_file_unless_two_files_share_a_name() -> None:
    methods = ["full", "plan:a/x/default.json", "plan:b/y/default.json", "plan:c/kv05.json"]
    assert labels(methods) == {
        "full": "full",
        "plan:a/x/default.json": "plan:a/x/default.json",
        "plan:b/y/default.json": "plan:b/y/default.json",
        "plan:c/kv05.json": "plan:kv05",
    }
