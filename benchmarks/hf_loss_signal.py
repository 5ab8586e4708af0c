"""Seconds for the loss signal of `aah plan search --signal loss` on a transformers model:
replaying the layers before each cut (`aah.integrations.hf.search.layer_replay`) against one whole
forward per cut, interleaved A B A B in one run, on a randomly initialised Llama-style model (the
cost does not depend on the weights).

    python benchmarks/hf_loss_signal.py --threads 1
"""

from __future__ import annotations

import argparse
import json

import torch

from aah.bench.timing import interleaved_medians
from aah.integrations import hf
from aah.integrations.hf.run.model_layout import layout
from aah.integrations.hf.search.cut_loss import Imposed, cut_plan, loss_increase, mean_loss


def whole_forwards(model, batches, candidates, sinks):  # type: ignore[no-untyped-def]
    """The same measurement without the replay: every cut runs every layer."""
    lay, seq_len = layout(model), int(batches[0].shape[1])
    group = lay.n_head // lay.n_kv_head
    rows = [[sinks] * lay.n_head for _ in range(lay.n_layer)]
    out = torch.zeros(lay.n_layer, lay.n_kv_head, len(candidates), dtype=torch.float64)
    with hf.applied(model, Imposed([[seq_len] * lay.n_head] * lay.n_layer, rows)):
        base = mean_loss(model, batches)
    for layer in range(lay.n_layer):
        for kv in range(lay.n_kv_head):
            for j, window in enumerate(candidates):
                if window < seq_len:
                    plan = cut_plan(lay.n_layer, lay.n_head, group, seq_len, layer, kv, window)
                    with hf.applied(model, Imposed(plan, rows)):
                        out[layer, kv, j] = mean_loss(model, batches) - base
    return out


def main() -> int:
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batches", type=int, default=2, help="calibration batches of 1 row")
    parser.add_argument("--reps", type=int, default=2, help="timed repetitions per route")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=args.seq_len,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    batches = [torch.randint(0, 256, (1, args.seq_len)) for _ in range(args.batches)]
    candidates = [args.seq_len // 16, args.seq_len // 4, args.seq_len]
    routes = {
        "replay": lambda: loss_increase(model, batches, candidates, sinks=4),
        "whole-forward": lambda: whole_forwards(model, batches, candidates, 4),
    }
    raw: dict = {}  # each route's last answer, to compare them
    median = interleaved_medians(routes, reps=args.reps, answers=raw)  # after 1 untimed round
    result = {
        "benchmark": "hf_loss_signal",
        "model": {
            "layers": args.layers,
            "hidden": args.hidden,
            "heads": args.heads,
            "kv_heads": args.kv_heads,
        },
        "seq_len": args.seq_len,
        "batches": args.batches,
        "candidates": candidates,
        "threads": torch.get_num_threads(),
        "reps": args.reps,
        "median_s": {name: round(s, 3) for name, s in median.items()},
        "speedup": round(median["whole-forward"] / median["replay"], 2),
        "max_abs_diff": float((raw["replay"] - raw["whole-forward"]).abs().max()),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
