"""Tiny random Hugging Face models built from configs (no download), one per supported family.

transformers is imported inside the helpers: each test module skips itself when it is missing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

VOCAB = 300  # >= 256, so the UTF-8 byte stand-in for a tokenizer fits
FAMILIES = ("gpt2", "llama", "qwen2", "qwen3", "mistral", "gemma3_text")
#: families whose tiny config has a sliding-window layer: its DynamicCache drops old keys
SLIDING = ("mistral", "gemma3_text")
#: the plan searches' calibration length, candidate windows and attention sinks
SEARCH_T = 32
SEARCH_CANDIDATES = [2, 4, 8, 16, 32]
SEARCH_SINKS = 2


def search_ids(n: int = 2, seed: int = 3) -> torch.Tensor:
    """(n, SEARCH_T) seeded token ids (2 and up: no BOS/EOS) for the plan-search tests."""
    return torch.randint(2, VOCAB, (n, SEARCH_T), generator=torch.Generator().manual_seed(seed))


def tiny_config(family: str, **overrides: object) -> object:
    """A 2-layer config with 4 query heads (2 KV heads where the family has GQA), hidden 64."""
    import transformers

    common = {"vocab_size": VOCAB, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}
    if family == "gpt2":
        kw = {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128}
        kw.update(attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
        return transformers.GPT2Config(**{**common, **kw, **overrides})
    kw = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
    }
    if family == "qwen3":
        kw["head_dim"] = 16
    if family == "mistral":
        kw["sliding_window"] = 16  # the layer's own window, combined with the plan's
    if family == "gemma3_text":
        # one sliding layer (its own window, combined with the plan's), one full layer, and a
        # score scale that is not head_dim ** -0.5
        kw.update(head_dim=16, sliding_window=16, query_pre_attn_scalar=32)
        kw["layer_types"] = ["sliding_attention", "full_attention"]
    cls = {
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "qwen3": transformers.Qwen3Config,
        "mistral": transformers.MistralConfig,
        "gemma3_text": transformers.Gemma3TextConfig,
    }[family]
    return cls(**{**common, **kw, **overrides})


def tiny_model(family: str, seed: int = 0, implementation: str = "sdpa", **overrides: object):
    """A causal LM in eval mode with random weights (fixed seed)."""
    import transformers

    torch.manual_seed(seed)
    config = tiny_config(family, **overrides)
    config._attn_implementation = implementation
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def plant_local_head(model, layer: int = 0, head: int = 0, gain: float = 2.0) -> None:
    """Make one GPT-2 head attend to its last few tokens, whatever the tokens are.

    Positions get zero-mean sinusoid features (cos, sin, -cos, -sin per frequency, so LayerNorm
    only rescales them) and tiny token embeddings; the head's q and k read (cos, sin) pairs, so
    its score depends on i - j only, sum_f cos(w_f (i - j)), which peaks at j = i.
    """
    n_freq = 8
    with torch.no_grad():
        pos = torch.arange(model.config.n_positions, dtype=torch.float32)[:, None]
        omega = 1.6 ** -torch.arange(n_freq, dtype=torch.float32)
        cos, sin = torch.cos(pos * omega), torch.sin(pos * omega)
        wpe = model.transformer.wpe.weight
        wpe.zero_()
        wpe[:, 0 : 4 * n_freq : 4], wpe[:, 1 : 4 * n_freq : 4] = cos, sin
        wpe[:, 2 : 4 * n_freq : 4], wpe[:, 3 : 4 * n_freq : 4] = -cos, -sin
        model.transformer.wte.weight.mul_(0.01)
        c_attn = model.transformer.h[layer].attn.c_attn  # Conv1D: x @ W, W (embd, 3 * embd)
        embd, head_dim = model.config.n_embd, model.config.n_embd // model.config.n_head
        for part in (0, 1):  # q, then k
            cols = slice(part * embd + head * head_dim, part * embd + (head + 1) * head_dim)
            c_attn.weight[:, cols] = 0.0
            c_attn.bias[cols] = 0.0
            for f in range(n_freq):
                c_attn.weight[4 * f, cols.start + 2 * f] = gain
                c_attn.weight[4 * f + 1, cols.start + 2 * f + 1] = gain


def _permute(w: torch.Tensor, n_head: int) -> np.ndarray:
    """The row order llama.cpp stores Q/K projections in (interleaved rotary halves), which
    transformers undoes on load; writing the plain order would load a different model."""
    rows, cols = w.shape
    return (
        w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols).numpy()
    )


def write_gguf(model, path: Path) -> None:
    """`model` (a transformers Llama) as a float32 GGUF file with llama.cpp's tensor names."""
    import gguf

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


def run_cli_search(tmp_path: Path, *flags: str) -> tuple[Path, Path, Path]:
    """`aah plan search` on a tiny Llama saved under `tmp_path` and a small code text, with
    T = 32, 2 batches and the given `flags`; (model folder, text file, plan file) for what
    the test checks next."""
    import argparse

    from aah.cli.hf import plan_args

    model_dir = tmp_path / "model"
    tiny_model("llama").save_pretrained(model_dir)
    text = tmp_path / "text.txt"
    text.write_text("def f(x):\n    return x * 2  # doubles\n" * 12)
    out = tmp_path / "plan.json"
    parser = argparse.ArgumentParser()
    plan_args.add_plan_search_arguments(parser)
    argv = [str(model_dir), "--text", str(text), "--out", str(out), "--seq-len", "32"]
    assert plan_args.run_plan_search(parser.parse_args([*argv, "--max-batches", "2", *flags])) == 0
    return model_dir, text, out
