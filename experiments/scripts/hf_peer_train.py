"""Train a small Llama-style model (transformers) on `synthetic:recall` with a plain loop.

The model for the peer comparison (`experiments/scripts/hf_peer.py`): byte vocabulary, GQA
(8 query / 2 KV heads), trained at T=256 on the train stream of configs/recall.toml's task (fused
values, 16 keys x 8 values, one background word per record) with its recipe (AdamW, lr 3e-3, 50
warm-up steps, cosine to 1e-3, batch 32). Validation: recall accuracy with the full causal
attention (sdpa) on the held-out stream, overall and in the farthest bucket (128-255 bytes).

    python -m experiments.scripts.hf_peer_train --seed 0 --out results/hf-peer/model-s0

Writes `save_pretrained` files and `train.json` (config, curve, final accuracies, seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from aah.data.loader import answer_marks
from aah.data.recall import generate_recall
from aah.data.synthetic import TASK_SEED, distance_buckets
from aah.eval.recall_accuracy import RecallCounter

SEQ_LEN = 256
RECALL = {"words": 1, "n_keys": 16, "n_values": 8, "fused": True}


def recall_stream(n_tokens: int, seed: int):  # type: ignore[no-untyped-def]
    """The task's byte stream and answer distances (train seed TASK_SEED + 1, val + 2)."""
    return generate_recall(n_tokens, SEQ_LEN, seed, **RECALL)


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=256, hidden_size=args.d_model, intermediate_size=args.d_ff,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=SEQ_LEN,
        tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=1,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config)


def val_windows(n_windows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, y, marks (n, T) from the held-out stream's first contiguous windows."""
    stream = recall_stream((n_windows + 1) * SEQ_LEN + 1, TASK_SEED + 2)
    tok = stream.tokens.astype(np.int64)
    starts = np.arange(n_windows) * SEQ_LEN
    x = torch.from_numpy(np.stack([tok[s : s + SEQ_LEN] for s in starts]))
    y = torch.from_numpy(np.stack([tok[s + 1 : s + SEQ_LEN + 1] for s in starts]))
    return x, y, answer_marks(stream.answer_distance, starts, SEQ_LEN)


@torch.no_grad()
def evaluate(model: torch.nn.Module, x, y, marks, batch: int = 64) -> dict:  # type: ignore[no-untyped-def]
    model.eval()
    counter = RecallCounter(distance_buckets(SEQ_LEN))
    loss = 0.0
    for i in range(0, x.shape[0], batch):
        logits = model(input_ids=x[i : i + batch]).logits
        loss += torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), y[i : i + batch].flatten(), reduction="sum"
        ).item()
        counter.add(logits, y[i : i + batch], marks[i : i + batch])
    model.train()
    res = counter.result()
    return {
        "acc": res["val_acc"],
        "far_acc": res["val_acc_by_distance"]["128-255"],
        "bits_per_byte": loss / y.numel() / math.log(2),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--d-ff", type=int, default=384)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-windows", type=int, default=128)
    p.add_argument("--target-far", type=float, default=0.97, help="stop once far acc >= this")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    train = recall_stream(2_000_000, TASK_SEED + 1)
    tokens = torch.from_numpy(train.tokens.astype(np.int64))
    vx, vy, vm = val_windows(args.eval_windows)
    model = build_model(args)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1000 + args.seed)
    curve = []
    for step in range(1, args.steps + 1):
        if step <= args.warmup:
            lr = args.lr * step / args.warmup
        else:
            frac = (step - args.warmup) / max(1, args.steps - args.warmup)
            lr = args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * frac))
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, tokens.numel() - SEQ_LEN - 1, (args.batch_size,), generator=gen)
        idx = starts[:, None] + torch.arange(SEQ_LEN + 1)
        chunk = tokens[idx]
        logits = model(input_ids=chunk[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.eval_every == 0 or step == args.steps:
            ev = evaluate(model, vx, vy, vm)
            ev.update(step=step, train_loss=loss.item(), seconds=time.perf_counter() - start)
            curve.append(ev)
            print(json.dumps(ev), flush=True)
            if ev["far_acc"] is not None and ev["far_acc"] >= args.target_far:
                break
    model.eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    info = {
        "seed": args.seed,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "task": {"corpus": "synthetic:recall", "seq_len": SEQ_LEN, **RECALL},
        "params": sum(p.numel() for p in model.parameters()),
        "curve": curve,
        "final": curve[-1],
        "seconds": time.perf_counter() - start,
    }
    (args.out / "train.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
