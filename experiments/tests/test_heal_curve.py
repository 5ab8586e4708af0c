"""`python -m experiments.scripts.heal_curve`: the window's KL is measured on the very blocks
the heal held out (its un-healed start point, replayed, comes out equal), and the curve's
shares are 1 - KL / KL(window)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("peft")

from hf_tokenized import save_tokenized_llama

from experiments.scripts import heal_curve

T = 64


def test_the_replayed_blocks_are_the_heals_own_and_the_curve_is_written(tmp_path) -> None:
    import aah.hf as hf
    from aah.integrations.hf.search.heal import HealOptions

    folder = tmp_path / "llama"
    save_tokenized_llama(folder, max_position_embeddings=128)
    model, _ = hf.load_model(str(folder))
    n_layer, n_head = model.config.num_hidden_layers, model.config.num_attention_heads
    plan = hf.WindowPlan.of([[5 + h % 3 for h in range(n_head)]] * n_layer, sinks=0, seq_len=T)
    opts = HealOptions(kinds=("lora",), rank=2, steps=4, train_blocks=2, held_out=2, eval_every=2)
    healed = hf.heal(model, plan, options=opts, progress=False)
    assert healed.params, "the tiny heal must keep parameters for this test to mean anything"
    # The un-healed plan replayed as the "window" is the heal's own step-0 point, to rounding.
    replayed = heal_curve.window_kl(model, healed, plan)
    assert replayed == pytest.approx(healed.info["heal"]["held_out_kl_before"], rel=1e-6)

    healed_path, window_path = tmp_path / "healed.json", tmp_path / "window.json"
    healed.save(healed_path)
    hf.WindowPlan.of([[4] * n_head] * n_layer, sinks=0, seq_len=T).save(window_path)
    out = tmp_path / "curve.json"
    argv = ["--model", str(folder), "--healed", str(healed_path), "--window", str(window_path),
            "--out", str(out), "--plot", str(tmp_path / "curve.png"), "--threads", "1"]  # fmt: skip
    assert heal_curve.main(argv) == 0
    record = json.loads(out.read_text())
    curve = healed.info["heal"]["curve"]
    assert [r["step"] for r in record["rows"]] == [p["step"] for p in curve]
    for row, point in zip(record["rows"], curve, strict=True):
        assert row["gap_closed"] == pytest.approx(1 - point["held_out_kl"] / record["window_kl"])
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_a_plan_that_was_not_healed_or_a_window_at_zero_is_refused(tmp_path) -> None:
    import aah.hf as hf

    path = tmp_path / "plain.json"
    hf.WindowPlan.of([[4, 4]], sinks=0, seq_len=T).save(path)
    argv = ["--model", "unused", "--healed", str(path), "--window", str(path), "--out",
            str(tmp_path / "c.json")]  # fmt: skip
    with pytest.raises(ValueError, match="not a healed plan"):
        heal_curve.main(argv)
    with pytest.raises(ValueError, match="must be > 0"):
        heal_curve.curve_rows([{"step": 0, "seconds": 0.0, "held_out_kl": 0.1}], 0.0)
