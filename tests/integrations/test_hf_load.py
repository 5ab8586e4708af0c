"""Loading models from GGUF files: a tiny Llama written as GGUF by the test itself loads with the
same logits as the model it was written from, and the `aah plan` commands accept it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from hf_models import VOCAB, tiny_model  # noqa: E402

from aah.cli import main  # noqa: E402
from aah.integrations.hf_load import (  # noqa: E402
    ModelSource,
    load_model,
    require_gguf_support,
    resolve_source,
)


def _permute(w: torch.Tensor, n_head: int) -> np.ndarray:
    """The row order llama.cpp stores Q/K projections in (interleaved rotary halves), which
    transformers undoes on load; writing the plain order would load a different model."""
    rows, cols = w.shape
    return (
        w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols).numpy()
    )


def write_gguf(model, path: Path) -> None:
    """`model` (a transformers Llama) as a float32 GGUF file with llama.cpp's tensor names."""
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    tensors = {
        "token_embd.weight": state["model.embed_tokens.weight"],
        "output_norm.weight": state["model.norm.weight"],
        "output.weight": state["lm_head.weight"],
    }
    names = {
        "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    }  # fmt: skip
    for layer in range(cfg.num_hidden_layers):
        for hf_name, gguf_name in names.items():
            tensors[f"blk.{layer}.{gguf_name}.weight"] = state[
                f"model.layers.{layer}.{hf_name}.weight"
            ]
    for name, tensor in tensors.items():
        if name.endswith("attn_q.weight"):
            array = _permute(tensor, cfg.num_attention_heads)
        elif name.endswith("attn_k.weight"):
            array = _permute(tensor, cfg.num_key_value_heads)
        else:
            array = tensor.numpy()
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def gguf_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    source = tiny_model("llama", seed=5)
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_gguf(source, path)
    return source, path


def test_gguf_file_and_its_folder_load_the_model_it_was_written_from(gguf_model) -> None:
    source, path = gguf_model
    ids = torch.randint(2, VOCAB, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = source(input_ids=ids).logits
    for name in (str(path), str(path.parent)):
        model, tokenizer = load_model(name, "cpu")
        assert tokenizer is None  # the file carries no tokenizer: bytes stand-in
        with torch.no_grad():
            got = model(input_ids=ids).logits
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_resolve_source_cases(tmp_path: Path) -> None:
    assert resolve_source("org/name") == ModelSource("org/name")
    with pytest.raises(ValueError, match=r"missing\.gguf"):
        resolve_source(str(tmp_path / "missing.gguf"))
    (tmp_path / "a.gguf").write_bytes(b"")
    assert resolve_source(str(tmp_path)) == ModelSource(str(tmp_path.resolve()), "a.gguf")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match=r"a\.gguf, b\.gguf"):
        resolve_source(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")  # a transformers folder wins
    assert resolve_source(str(tmp_path)) == ModelSource(str(tmp_path))


def test_missing_gguf_package_names_the_install_line(monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"gguf package: pip install 'aah-attention\[hf\]'"):
        require_gguf_support()


def test_plan_search_and_apply_take_a_gguf_file(gguf_model, tmp_path: Path, capsys) -> None:
    _, path = gguf_model
    text = tmp_path / "calib.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    plan = tmp_path / "plan.json"
    common = ["--text", str(text), "--seq-len", "32", "--max-batches", "2", "--device", "cpu"]
    search = ["plan", "search", str(path), *common, "--candidates", "4,8,16,32", "--sinks", "2"]
    assert main([*search, "--budget", "0.5", "--out", str(plan)]) == 0
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert found["coverage"] <= 0.5 and plan.is_file()
    assert main(["plan", "apply", str(path), "--plan", str(plan), *common]) == 0
    applied = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert applied["ppl_plan"] > 0 and applied["seq_len"] == 32


def test_plan_apply_takes_any_plan_file_with_its_sinks(gguf_model, tmp_path: Path, capsys) -> None:
    from aah.plan import WindowPlan

    model, path = gguf_model
    n_layer, n_head = model.config.num_hidden_layers, model.config.num_attention_heads
    text = tmp_path / "calib.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    common = ["--text", str(text), "--seq-len", "32", "--max-batches", "2", "--device", "cpu"]
    coverage = {}
    for sinks in (0, 2):  # the format `aah bench pretrained` writes: extra keys, its own sinks
        plan = tmp_path / f"bench-{sinks}.json"
        WindowPlan.of([[4] * n_head] * n_layer, sinks, 32, method="output", kv_fraction=0.3).save(
            plan
        )
        assert main(["plan", "apply", str(path), "--plan", str(plan), *common]) == 0
        coverage[sinks] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["coverage"]
    assert coverage[2] > coverage[0]  # the file's sinks were applied, not dropped
