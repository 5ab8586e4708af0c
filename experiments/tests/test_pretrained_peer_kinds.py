"""experiments/scripts/pretrained_peer.py on the suite's kinds of text, end to end on a tiny
random Llama (bytes, no tokenizer), without kvpress: the blocks are the kinds' own, `full`
equals an independent recompute, and the table's per-kind and pooled numbers equal a hand
computation over documents from a stand-in press file."""

from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import tiny_model

from aah.report.stats import estimate
from experiments.pretrained import kinds
from experiments.scripts import pretrained_peer as peer

T, PROMPT, PER_KIND = 40, 30, 2
KINDS = ["python", "prose", "c"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("peer-kinds")
    model_dir = root / "llama"
    tiny_model("llama", max_position_embeddings=256).save_pretrained(model_dir)
    out = root / "out"
    argv = ["windows", "--model", str(model_dir), "--out", str(out), "--seq-len", str(T),
            "--prompt", str(PROMPT), "--kinds", ",".join(KINDS), "--blocks-per-kind",
            str(PER_KIND), "--calib-blocks", "2", "--kv-fractions", "0.5"]  # fmt: skip
    assert peer.main(argv) == 0
    return out, json.loads((out / "windows.json").read_text())


def test_the_blocks_are_the_kinds_own_with_their_documents(run) -> None:
    out, mine = run
    drawn = [b for name in KINDS for b in kinds.kind_blocks(None, [name], T, PER_KIND, seed=0)]
    saved = torch.load(out / "blocks.pt")
    assert saved["ids"].tolist() == [list(b.ids) for b in drawn]
    assert mine["blocks"] == [b.record() for b in drawn] and mine["kinds"] == KINDS
    assert {r["method"] for r in mine["rows"]} == {"full", "uniform", "output"}


def test_full_is_the_continuation_loss_recomputed(run) -> None:
    out, mine = run
    model = tiny_model("llama", max_position_embeddings=256)
    full = next(r for r in mine["rows"] if r["method"] == "full")["block_losses"]
    for ids, got in zip(torch.load(out / "blocks.pt")["ids"], full, strict=True):
        with torch.no_grad():
            logp = model(input_ids=ids[None]).logits[0].double().log_softmax(-1)
        want = -logp[PROMPT - 1 : -1].gather(1, ids[PROMPT:, None]).mean()
        assert math.isclose(got, float(want), rel_tol=1e-5)


def test_the_table_is_per_kind_and_pooled_over_documents(run) -> None:
    out, mine = run
    by = {r["method"]: r for r in mine["rows"]}
    # A stand-in press file: "streaming" scores as uniform, "adakv" as output but holds the
    # full cache (it masks, it does not free).
    press_rows = [
        {**by["full"]},
        {**by["uniform"], "method": "kvpress-streaming", "kv_after_prompt": 0.5,
         "frees_memory": True},
        {**by["output"], "method": "kvpress-adakv-snapkv", "kv_after_prompt": 1.0,
         "frees_memory": False},
    ]  # fmt: skip
    press = {"ids_digest": mine["ids_digest"], "rows": press_rows,
             "env": {"kvpress": "stand-in", "transformers": "x"}}  # fmt: skip
    (out / "kvpress.json").write_text(json.dumps(press))
    assert peer.main(["table", "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    assert set(result["windows_rows"]) == {*KINDS, "pooled"}
    md = (out / "table.md").read_text()
    assert "Masking rather than freeing (bytes held as full): kvpress-adakv-snapkv." in md
    # pooled output vs uniform: one block per document here, so the mean of the differences
    diffs = [a - b for a, b in zip(by["output"]["block_losses"], by["uniform"]["block_losses"],
                                   strict=True)]  # fmt: skip
    row = next(r for r in result["windows_rows"]["pooled"] if r["method"] == "output")
    want = estimate(diffs)
    assert math.isclose(row["vs_uniform"]["mean"], want.mean, rel_tol=1e-9)
    assert math.isclose(row["vs_uniform"]["p"], want.p, rel_tol=1e-9)
    prose = next(r for r in result["windows_rows"]["prose"] if r["method"] == "output")
    assert math.isclose(prose["vs_uniform"]["mean"], sum(diffs[2:4]) / 2, rel_tol=1e-9)
    # one Holm family per protocol over its kind tables: 4 comparisons with uniform
    ps = sorted(r["vs_uniform"]["p"] for t in result["windows_rows"].values() for r in t
                if r["vs_uniform"] is not None)  # fmt: skip
    assert row["holm_p"] >= row["vs_uniform"]["p"] and len(ps) == 4


def test_blocks_of_one_document_count_once() -> None:
    # Three blocks, two of them from one document: the interval is over 2 documents' means.
    blocks = [{"kind": "prose", "document": d} for d in ("a", "a", "b")]
    rows = [
        {"method": "uniform", "fraction": 0.3, "kv_after_prompt": 0.3,
         "block_losses": [2.0, 2.0, 2.0]},
        {"method": "output", "fraction": 0.3, "kv_after_prompt": 0.3,
         "block_losses": [1.9, 1.7, 1.6]},
    ]  # fmt: skip
    tables = peer.kind_tables(rows, "uniform", [1.5, 1.5, 1.5], blocks)
    got = next(r for r in tables["pooled"][0] if r.method == "output").vs_uniform
    want = estimate([(-0.1 - 0.3) / 2, -0.4])  # document a's mean, document b
    assert got.n == 2 and math.isclose(got.mean, want.mean) and math.isclose(got.p, want.p)


class _KeepLast:
    """A stand-in press: after each layer's prefill, its cache keeps the last `keep` positions.

    It acts the way kvpress's presses do (a forward hook on every attention module that
    rewrites that layer's cache), so `run_press` is tested without kvpress installed.
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep

    def __call__(self, model: torch.nn.Module):
        import contextlib

        def hook(module, args, kwargs, output):
            cache = kwargs.get("past_key_values", kwargs.get("cache"))  # renamed in 5.x
            layer = cache.layers[module.layer_idx]
            layer.keys = layer.keys[:, :, -self.keep :].contiguous()
            layer.values = layer.values[:, :, -self.keep :].contiguous()
            return output

        stack = contextlib.ExitStack()
        for block in model.model.layers:
            handle = block.self_attn.register_forward_hook(hook, with_kwargs=True)
            stack.callback(handle.remove)
        return stack


def test_run_press_scores_the_continuation_and_measures_the_bytes_held() -> None:
    # The kvpress side's runner, without kvpress: with no press (and with a press that keeps
    # every prompt position) it is the continuation loss of a plain forward pass and holds
    # the full cache; a press that drops keys holds proportionally fewer bytes, and they are
    # measured from the cache rather than taken from its ratio.
    from experiments.scripts import pretrained_peer_kvpress as side

    model = tiny_model("llama", max_position_embeddings=256)
    torch.manual_seed(1)
    blocks = torch.randint(0, model.config.vocab_size, (2, T))
    config = model.config
    kv_heads = getattr(config, "num_key_value_heads", config.num_attention_heads)
    head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    full_bytes = config.num_hidden_layers * 2 * kv_heads * head_dim * PROMPT * 4
    full = side.run_press(model, blocks, PROMPT, None)
    assert full["kv_bytes"] == full_bytes
    for ids, got in zip(blocks, full["block_losses"], strict=True):
        with torch.no_grad():
            logp = model(input_ids=ids[None]).logits[0].double().log_softmax(-1)
        want = -logp[PROMPT - 1 : -1].gather(1, ids[PROMPT:, None]).mean()
        assert math.isclose(got, float(want), rel_tol=1e-5)
    same = side.run_press(model, blocks, PROMPT, _KeepLast(PROMPT))
    assert same["kv_bytes"] == full_bytes
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in
               zip(same["block_losses"], full["block_losses"], strict=True))  # fmt: skip
    cut = side.run_press(model, blocks, PROMPT, _KeepLast(PROMPT // 3))
    assert cut["kv_bytes"] == full_bytes * (PROMPT // 3) / PROMPT
    assert cut["block_losses"] != full["block_losses"]
