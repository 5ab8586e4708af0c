"""A lower bound on a training run's memory, checked before the model is built, so a
`model.max_seq_len` or `train.batch_size` far too large fails in a second with the numbers
instead of at an out-of-memory kill.

Lower bound, float32 (mixed precision keeps float32 master weights, so it is a bound there
too): weights, gradients and AdamW's two moments (16 bytes per parameter), plus, per layer,
the activations a backward needs at minimum (the block's input, the attention input, the
query/key/value and output projections and the MLP's hidden layer: (6 d + 2 d_ff) floats per
token), plus the logits and their gradient (2 V floats per token) of one micro-batch. Real
runs need more (temporaries, the allocator), so only a run whose *bound* exceeds the memory
available is refused.
"""

from __future__ import annotations

from pathlib import Path

import torch

from aah.model.config import GPTConfig

FLOAT = 4


def parameter_count(cfg: GPTConfig) -> int:
    """Weights of the GPT (embedding tied to the head; biases and norms left out)."""
    d, d_ff = cfg.d_model, cfg.d_ff or 4 * cfg.d_model
    kv = 2 * d * cfg.head_dim * cfg.n_kv_head
    per_layer = d * d + kv + d * d + 2 * d * d_ff  # q, k and v, output, MLP
    return cfg.vocab_size * d + cfg.n_layer * per_layer


def training_bytes_lower_bound(cfg: GPTConfig, micro_batch: int) -> int:
    """Bytes a float32 training step needs at least (module docstring)."""
    tokens = micro_batch * cfg.max_seq_len
    d_ff = cfg.d_ff or 4 * cfg.d_model
    state = 4 * FLOAT * parameter_count(cfg)
    activations = cfg.n_layer * tokens * (6 * cfg.d_model + 2 * d_ff) * FLOAT
    logits = 2 * tokens * cfg.vocab_size * FLOAT
    return state + activations + logits


def available_bytes(device: torch.device) -> int | None:
    """Memory free for this process on `device`, or None when it cannot be told."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type != "cpu":
        return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(cfg: GPTConfig, micro_batch: int, device: torch.device) -> None:
    """ValueError naming the sizes when even the lower bound does not fit."""
    need = training_bytes_lower_bound(cfg, micro_batch)
    have = available_bytes(device)
    if have is not None and need > have:
        raise ValueError(
            f"model.max_seq_len {cfg.max_seq_len} x train.batch_size {micro_batch} needs at "
            f"least {need / 2**30:.1f} GiB to train ({parameter_count(cfg):,} parameters, "
            f"{cfg.n_layer} layers of d_model {cfg.d_model}) but {have / 2**30:.1f} GiB is free "
            f"on {device.type}; lower model.max_seq_len, train.batch_size (raise "
            "train.grad_accum to keep the tokens per step) or the model size"
        )
