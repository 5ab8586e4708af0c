"""Post-hoc plan search on tiny HF models: mass measurement, budgets, plan files, data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hf_models import VOCAB, plant_local_head, tiny_model

from aah.attention import coverage
from aah.integrations import hf
from aah.integrations.hf.run.data import token_batches
from aah.integrations.hf.search.measure import measure_mass, measure_output_error
from aah.integrations.hf.search.plan_allocation import plan_from_mass
from aah.integrations.hf.search.plan_search import default_candidates, search_plan
from aah.plan import WindowPlan

T = 64
CANDIDATES = [1, 2, 4, 8, 16, 32, 64]


def calib(n: int = 2, seed: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, T), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def planted() -> tuple[torch.nn.Module, torch.Tensor]:
    """GPT-2 whose layer 0 head 0 looks at its last few tokens; its measured mass."""
    model = tiny_model("gpt2")
    plant_local_head(model, layer=0, head=0)
    ids = calib()
    return model, measure_mass(model, [ids[:1], ids[1:]], CANDIDATES)


def test_mass_separates_the_planted_local_head(planted) -> None:
    _, mass = planted
    assert mass.shape == (2, 4, len(CANDIDATES))
    assert mass[0, 0, 2] < 1e-3  # beyond 4 keys: nothing
    others = torch.cat([mass[0, 1:], mass[1]])
    assert (others[:, 2] > 0.5).all()  # random heads spread over the whole context
    assert (mass[..., -1] == 0).all()  # the full window loses nothing
    assert (mass[..., :-1].diff(dim=-1) <= 1e-9).all()  # wider windows never lose more


@pytest.mark.parametrize("budget", [0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.0])
def test_search_never_exceeds_the_budget(planted, budget: float) -> None:
    _, mass = planted
    plan = plan_from_mass(mass, CANDIDATES, T, budget, "GPT2LMHeadModel")
    assert plan.info["coverage"] <= budget
    assert plan.info["coverage"] == pytest.approx(coverage(plan.windows, T).causal, abs=0)
    assert all(w in CANDIDATES for row in plan.windows for w in row)
    flat = [w for row in plan.windows for w in row]
    # While the budget binds, the planted head gets the smallest window of all heads (strictly,
    # once the others can afford more); spare budget may later widen it at no mass cost.
    if budget <= 0.8:
        assert flat[0] <= min(flat[1:])
    if 0.2 <= budget <= 0.8:
        assert flat[0] < min(flat[1:])


def test_full_budget_gives_full_windows_to_spread_heads(planted) -> None:
    _, mass = planted
    plan = plan_from_mass(mass, CANDIDATES, T, 1.0, "m")
    assert all(w == T for row in plan.windows for w in row[1:])
    assert plan.info["lost_mass"] < 1e-3


def test_budget_below_the_smallest_window_is_refused(planted) -> None:
    _, mass = planted
    with pytest.raises(ValueError, match="smallest candidate"):
        plan_from_mass(mass[..., 2:], CANDIDATES[2:], T, 0.05, "m")
    with pytest.raises(ValueError, match="budget"):
        plan_from_mass(mass, CANDIDATES, T, 0.0, "m")
    with pytest.raises(ValueError, match=r"give a larger budget$"):  # the smallest is already 1
        plan_from_mass(mass, CANDIDATES, T, 1e-4, "m")
    with pytest.raises(ValueError, match=r"give a larger budget or fewer sinks$"):
        plan_from_mass(mass, CANDIDATES, T, 0.02, "m", sinks=4)


def test_search_plan_end_to_end_with_gqa_leaves_the_model_as_it_was() -> None:
    model = tiny_model("llama")
    ids = calib(seed=5)
    with torch.no_grad():
        before = model(ids).logits
    plan = search_plan(model, ids, 0.4, seq_len=32, sample_queries=16, choose=False)
    assert plan.info["model"] == "LlamaForCausalLM" and plan.seq_len == 32
    assert plan.info["candidates"] == default_candidates(32)
    assert len(plan.windows) == 2 and all(len(row) == 4 for row in plan.windows)
    assert plan.info["coverage"] <= 0.4
    assert model.config._attn_implementation == "sdpa" and hf.current_plan(model) is None
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, before)


def test_a_searched_plan_round_trips_exactly_with_its_record(tmp_path) -> None:
    plan = search_plan(
        tiny_model("llama"), calib(), 0.4, seq_len=32, sample_queries=16, choose=False
    )
    path = tmp_path / "plan.json"
    plan.save(path)
    assert WindowPlan.load(path) == plan  # floats in their shortest repr: exactly
    data = json.loads(path.read_text())
    assert set(data) == {"windows", "sinks", "seq_len", "budget", "coverage", "candidates",
                         "model", "lost_mass", "budget_unit", "kv_bytes", "signal",
                         "loss_increase"}  # fmt: skip


@pytest.mark.parametrize("name", ["searched_plan_coverage.json", "searched_plan_kv_bytes.json"])
def test_plan_files_of_the_former_searched_plan_format_load(name: str) -> None:
    path = Path(__file__).parents[1] / "fixtures" / name  # written by the former SearchedPlan
    data = json.loads(path.read_text())
    plan = WindowPlan.load(path)
    assert plan.windows == data["windows"] and plan.seq_len == data["seq_len"]
    assert plan.sinks == (data["sinks"] or [[0] * len(r) for r in data["windows"]])
    assert plan.info == {k: v for k, v in data.items() if k not in ("windows", "sinks", "seq_len")}
    assert plan.info["coverage"] == data["coverage"]  # 0.30000000000000004 stays that


def test_committed_plan_files_load() -> None:
    root = Path(__file__).parents[2] / "results"
    files = sorted(root.glob("posthoc-text/plans/*/*.json"))
    assert files, "the post-hoc study's plan files are committed"
    for path in files:
        plan = WindowPlan.load(path)
        assert plan.windows == json.loads(path.read_text())["windows"]


def test_plan_file_errors_name_the_problem() -> None:
    good = json.loads(
        (Path(__file__).parents[1] / "fixtures/searched_plan_kv_bytes.json").read_text()
    )
    with pytest.raises(ValueError, match="'windows' key"):
        WindowPlan.from_data({k: v for k, v in good.items() if k != "windows"})
    with pytest.raises(ValueError, match="window"):
        WindowPlan.from_data({**good, "windows": [[0]]})
    with pytest.raises(ValueError, match="sinks"):
        WindowPlan.from_data({**good, "sinks": [[1]]})


def test_token_batches_from_text_ids_and_tensors() -> None:
    text = "héllo, world " * 10
    batches = token_batches(text, 16, batch_size=2, vocab_size=VOCAB)
    stream = list(text.encode("utf-8"))
    assert torch.cat(batches).reshape(-1).tolist() == stream[: len(stream) // 16 * 16]
    assert all(b.shape[1] == 16 for b in batches) and batches[0].shape[0] == 2
    with pytest.warns(UserWarning, match="fewer than seq_len"):
        assert token_batches([[1, 2, 3], [4, 5]], 8)[0].tolist() == [[1, 2, 3, 4, 5]]
    assert len(token_batches(torch.arange(40).view(2, 20), 10, max_batches=3)) == 3
    with pytest.raises(ValueError, match="vocab_size >= 256"):
        token_batches("abc", 4, vocab_size=100)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        token_batches([[1, 12]], 4, vocab_size=10)


def test_import_without_transformers_and_a_clear_error() -> None:
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "import aah.cli.hf.plan_args\n"
        "print('parser loads torch:', 'torch' in sys.modules)\n"
        "import aah, aah.integrations.hf as hf, aah.integrations.hf.search.plan_search, "
        "aah.integrations.hf.search.sweep, aah.report.plan_heatmap, aah.cli.hf.plan_args\n"
        "try:\n    hf.register()\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'aah-attention[hf]'" in out.stdout
    assert "parser loads torch: False" in out.stdout  # the CLI builds its parser cheaply


def test_output_signal_keeps_the_planted_local_head_cheapest(planted) -> None:
    model, _ = planted
    ids = calib()
    err = measure_output_error(model, [ids[:1], ids[1:]], CANDIDATES, sample_queries=32)
    at8 = err[0, :, CANDIDATES.index(8)]
    assert int(at8.argmin()) == 0, at8  # the head that looks at its last few tokens
    assert torch.all(err[..., -1] < 1e-8)  # the full window changes nothing


def test_output_signal_search_on_every_family(family: str) -> None:
    model = tiny_model(family)
    plan = search_plan(
        model, calib(seed=7), 0.4, seq_len=32, sample_queries=16, signal="output", choose=False
    )
    assert plan.info["signal"] == "output" and plan.info["lost_mass"] is None
    assert plan.info["coverage"] <= 0.4 and len(plan.windows) == 2
    assert WindowPlan.from_data(json.loads(plan.to_json())) == plan


def test_applied_takes_sinks_and_puts_the_model_back() -> None:
    model = tiny_model("llama")
    with hf.applied(model, [[8] * 4] * 2, sinks=2):
        assert hf.current_sinks(model) == [[2] * 4] * 2
    assert hf.current_plan(model) is None and model.config._attn_implementation == "sdpa"


def test_output_plus_retrieval_search_allocates_on_the_blend_of_both_signals() -> None:
    from aah.integrations.hf.run.model_layout import kv_shape
    from aah.integrations.hf.search.measure import blended, measure_signal
    from aah.integrations.hf.search.retrieval_calib import retrieval_prompts

    model, t = tiny_model("llama", max_position_embeddings=256), 128
    ids = torch.randint(0, VOCAB, (2, t), generator=torch.Generator().manual_seed(5))
    plan = search_plan(model, ids, 0.5, seq_len=t, sinks=2, signal="output+retrieval", choose=False,
                       sample_queries=16)  # fmt: skip
    assert plan.info["signal"] == "output+retrieval" and plan.info["lost_mass"] is None
    assert WindowPlan.from_data(json.loads(plan.to_json())) == plan

    cands = default_candidates(t)
    opts = {"sample_queries": 16, "seed": 0, "sinks": 2}
    text = measure_signal(model, [ids[:1], ids[1:]], cands, "output", **opts)
    prompts = retrieval_prompts([ids[:1], ids[1:]], None, 16, vocab_size=VOCAB)
    answer = measure_signal(model, [p.ids for p in prompts], cands, "output",
                            query_rows=[p.rows for p in prompts], **opts)  # fmt: skip
    want = plan_from_mass(blended([text, answer]), cands, t, 0.5, "LlamaForCausalLM",
                          shape=kv_shape(model), sinks=2)  # fmt: skip
    assert plan.windows == want.windows


def test_whole_layers_keep_full_attention_within_the_budget_and_are_recorded() -> None:
    model = tiny_model("llama")
    plan = search_plan(
        model, calib(seed=5), 0.7, seq_len=32, sample_queries=16, whole_layers=[1], choose=False
    )
    assert plan.windows[1] == [32] * 4 and min(plan.windows[0]) < 32
    assert plan.info["whole_layers"] == [1] and plan.info["coverage"] <= 0.7
    assert WindowPlan.from_data(json.loads(plan.to_json())) == plan
    with pytest.raises(ValueError, match=r"below the smallest plan's .* fewer whole layers"):
        search_plan(model, calib(seed=5), 0.7, seq_len=32, sample_queries=16,
                    whole_layers=[0, 1])  # fmt: skip


def test_a_whole_layer_out_of_range_is_refused_before_any_measuring() -> None:
    class Unmeasurable:
        name, unit = "never", "loss"

        def measure(self, *args: object) -> None:
            raise AssertionError("measured before the layers were checked")

    refused = r"whole_layers must be distinct layers in 0\.\.1, got \[2\]"
    with pytest.raises(ValueError, match=refused):
        search_plan(tiny_model("llama"), calib(), 0.5, seq_len=32, signal=Unmeasurable(),
                    whole_layers=[2])  # fmt: skip

    with pytest.raises(ValueError, match="largest candidate, 16, which is not full attention"):
        search_plan(tiny_model("llama"), calib(), 0.5, seq_len=32, signal=Unmeasurable(),
                    candidates=[4, 8, 16], whole_layers=[0])  # fmt: skip
