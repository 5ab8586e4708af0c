"""Streaming a text past the model's positions: `stream_perplexity` against perplexities
recomputed from one whole-sequence forward (the float64 rolling rule of `test_hf_rolling` for a
rolling cache, the plain model for full attention), and `aah bench stream` end to end on a tiny
tokenized Llama (rows, summary, plot, --compare's arms at the plan's bytes, bad input)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers.cache_utils", reason="needs layered caches")

from hf_models import tiny_model
from hf_tokenized import TEXT, save_tokenized_llama
from test_hf_rolling import PLAN, SINKS, ids_of, planned, reference_logits
from transformers import DynamicCache

from aah.bench import stream as bench_stream
from aah.bench.stream_arms import compare_arms, rolling_bytes
from aah.integrations import hf
from aah.integrations.hf.run.streaming import stream_perplexity
from aah.plan import WindowPlan


def chunk_perplexities(logits: torch.Tensor, ids: torch.Tensor, chunk: int) -> list[float]:
    """exp(mean NLL) per chunk of [a, b): token i scored by logits i - 1, token 0 never."""
    nll = torch.nn.functional.cross_entropy(logits[0, :-1].double(), ids[0, 1:], reduction="none")
    out = []
    for a in range(0, ids.shape[1], chunk):
        scored = nll[max(a - 1, 0) : min(ids.shape[1], a + chunk) - 1]
        out.append(math.exp(float(scored.mean())))
    return out


def test_rolling_stream_perplexity_equals_the_rule_on_the_whole_text() -> None:
    ids = ids_of(300)
    model = planned("llama")
    rows = stream_perplexity(model, ids[0], hf.per_head_cache(model, rolling=True), chunk=70)
    expected = chunk_perplexities(reference_logits("llama", ids), ids, 70)
    assert [r.position for r in rows] == [70, 140, 210, 280, 300]
    assert [r.perplexity for r in rows] == pytest.approx(expected, rel=1e-5)
    assert len({r.kv_mb for r in rows}) == 1 and rows[0].kv_mb > 0  # windows full by 70
    assert all(r.tokens_per_s > 0 for r in rows)


def test_full_attention_stops_at_its_limit_and_counts_its_growing_cache() -> None:
    model = tiny_model("llama", max_position_embeddings=64)
    ids = ids_of(200)
    rows = stream_perplexity(model, ids, DynamicCache(), chunk=20, limit=64)
    with torch.no_grad():
        expected = chunk_perplexities(model(ids[:, :64]).logits, ids[:, :64], 20)
    assert [r.position for r in rows] == [20, 40, 60, 64]
    assert [r.perplexity for r in rows] == pytest.approx(expected, rel=1e-5)
    per_position = 2 * 2 * 2 * 16 * 4  # layers x KV heads x (k, v) x head dim x float32 bytes
    assert [r.kv_mb * 2**20 for r in rows] == [p * per_position for p in (20, 40, 60, 64)]


def test_stream_perplexity_refuses_bad_input() -> None:
    model = planned("llama")
    cache = hf.per_head_cache(model, rolling=True)
    with pytest.raises(ValueError, match="one row of >= 2 token ids"):
        stream_perplexity(model, ids_of(5).repeat(2, 1), cache)
    with pytest.raises(ValueError, match="chunk must be an int >= 1, got 0"):
        stream_perplexity(model, ids_of(5), cache, chunk=0)


def test_compare_arms_hold_no_more_than_the_plan() -> None:
    model = tiny_model("llama", max_position_embeddings=64)
    budget = rolling_bytes(model, PLAN, SINKS)
    arms = compare_arms(model, PLAN, SINKS, 64)
    assert [a.name.split()[0] for a in arms] == ["plan", "window", "window", "full"]
    for arm in arms[1:3]:
        held = rolling_bytes(model, arm.windows, arm.sinks)
        wider = [[w + 1 for w in row] for row in arm.windows]
        assert held <= budget < rolling_bytes(model, wider, arm.sinks)  # the widest that fits
    assert arms[1].sinks[0][0] == 4 and arms[2].sinks[0][0] == 0


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("stream")
    save_tokenized_llama(root / "model", max_position_embeddings=64)
    plan = root / "plan.json"
    WindowPlan.of(PLAN, SINKS, 32).save(plan)
    text = root / "text.txt"
    text.write_text(TEXT * 3, encoding="utf-8")
    return {"model": str(root / "model"), "plan": str(plan), "text": str(text),
            "root": str(root)}  # fmt: skip


def test_bench_stream_prints_rows_a_summary_and_a_plot(folder, capsys) -> None:  # type: ignore[no-untyped-def]
    plot = Path(folder["root"]) / "stream.png"
    argv = [folder["model"], "--plan", folder["plan"], "--text", folder["text"], "--tokens",
            "200", "--chunk", "32", "--compare", "--json", "--plot", str(plot)]  # fmt: skip
    assert bench_stream.main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    record = json.loads(out[-1])
    assert next(iter(record["arms"])) == "plan" and len(record["arms"]) == 4
    plan_rows = record["arms"]["plan"]["rows"]
    assert [r["position"] for r in plan_rows] == [32, 64, 96, 128, 160, 192, 200]
    full_rows = record["arms"]["full attention"]["rows"]
    assert full_rows[-1]["position"] == 64  # stops at the model's positions
    summary = record["arms"]["plan"]["summary"]
    assert summary["mean_ppl_past_positions"] == pytest.approx(
        sum(r["perplexity"] for r in plan_rows if r["position"] - 32 >= 64)
        / sum(1 for r in plan_rows if r["position"] - 32 >= 64)
    )
    assert summary["kv_constant_from_position"] == 32
    assert sum(line.lstrip().startswith("plan |") for line in out) == len(plan_rows)
    assert plot.stat().st_size > 1000


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--chunk", "0"], "--chunk must be >= 1"),
     (["--tokens", "1"], "--tokens must be >= 2"),
     (["--plot", "out.pdf"], "must name a .png"),
     (["--tokens", "100000"], "holds \\d+ tokens: give --tokens \\d+ or less")],
)  # fmt: skip
def test_bench_stream_refuses_bad_input(folder, flags, message) -> None:  # type: ignore[no-untyped-def]
    argv = [folder["model"], "--plan", folder["plan"], "--text", folder["text"], *flags]
    with pytest.raises(ValueError, match=message):
        bench_stream.main(argv)


def test_bench_stream_refuses_a_missing_text(folder) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="is not a file"):
        bench_stream.main([folder["model"], "--plan", folder["plan"], "--text", "nope.txt"])
