"""kvpress's StreamingLLM and SnapKV presses on the peer comparison's model and windows.

Runs in its own environment (kvpress pins its own transformers; it is not a dependency of
this project), with the project's sources on the path for the scoring code only:

    python -m venv /work/kvpress-venv
    /work/kvpress-venv/bin/pip install torch==2.13.0   # the CPU build, first
    /work/kvpress-venv/bin/pip install kvpress
    PYTHONPATH=src /work/kvpress-venv/bin/python -m experiments.scripts.hf_peer_kvpress \
        --model DIR --data /tmp/hfpeer/eval.npz --out R.json

Protocol as kvpress's pipeline runs it (`KVPressTextGenerationPipeline._forward`): the prompt
(P bytes, the "context") is prefilled by `model.model` inside `with press(model):`, which
compresses each layer's DynamicCache to `n_kept = int(P x (1 - compression_ratio))` positions
per KV head; the continuation (the "question", 64 bytes) is then fed in one call with
`position_ids` counting on from P, its positions appended uncompressed. Teacher forcing: the
logits of every continuation byte are scored (`hf_peer.Score`), with the prompt's last logit.
compression_ratio = 1 - f, so the bytes after the prompt are f x the full cache (floored to
whole positions). `full` (no press) checks the protocol against the project's own run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.scripts.hf_peer import FRACTIONS, PROMPT, SEQ_LEN, Score, dynamic_nbytes, scored


@torch.inference_mode()
def run_press(model: Any, data: dict[str, np.ndarray], press: Any, batch: int) -> dict[str, Any]:
    import contextlib

    from transformers import DynamicCache

    score = Score()
    held_prefill, held_end = [], []
    x_all = torch.from_numpy(data["x"])
    m_all = torch.from_numpy(data["marks"])
    for i in range(0, x_all.shape[0], batch):
        x, marks = x_all[i : i + batch], m_all[i : i + batch]
        b = x.shape[0]
        cache = DynamicCache()
        with press(model) if press is not None else contextlib.nullcontext():
            hidden = model.model(input_ids=x[:, :PROMPT], past_key_values=cache).last_hidden_state
        first = model.lm_head(hidden[:, -1:])
        held_prefill.append(dynamic_nbytes(cache) / b)
        pos = torch.arange(PROMPT, SEQ_LEN).unsqueeze(0).expand(b, -1)
        rest = model(input_ids=x[:, PROMPT:SEQ_LEN], past_key_values=cache, position_ids=pos)
        held_end.append(dynamic_nbytes(cache) / b)
        targets, m = scored(x, marks)
        score.add(torch.cat([first, rest.logits], dim=1), targets, m)
    out = score.result()
    out["kv_bytes"] = statistics.mean(held_prefill)
    out["kv_bytes_end"] = statistics.mean(held_end)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import kvpress
    import transformers
    from kvpress import SnapKVPress, StreamingLLMPress
    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    model = LlamaForCausalLM.from_pretrained(args.model, attn_implementation="sdpa").eval()
    d = np.load(args.data)
    data = {"x": d["x"], "marks": d["marks"]}
    start = time.perf_counter()
    rows = [{"method": "full", "fraction": 1.0, **run_press(model, data, None, args.batch)}]
    presses = {
        "kvpress-streaming": lambda r: StreamingLLMPress(compression_ratio=r, n_sink=4),
        "kvpress-snapkv": lambda r: SnapKVPress(compression_ratio=r, window_size=64),
    }
    for f in args.fractions:
        for name, make in presses.items():
            res = run_press(model, data, make(round(1 - f, 6)), args.batch)
            rows.append({"method": name, "fraction": f, **res})
            print(json.dumps({k: rows[-1][k] for k in ("method", "fraction", "acc", "far_acc")}))
    info = json.loads((Path(args.model) / "train.json").read_text())
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    out = {
        "engine": "kvpress",
        "model": str(args.model),
        "seed": info["seed"],
        "train_final": info["final"],
        "full_kv_bytes": cfg.num_hidden_layers * cfg.num_key_value_heads * PROMPT * head_dim * 8,
        "prompt": PROMPT,
        "seq_len": SEQ_LEN,
        "windows_evaluated": int(data["x"].shape[0]),
        "seconds": time.perf_counter() - start,
        "env": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "kvpress": getattr(kvpress, "__version__", None)
            or __import__("importlib.metadata").metadata.version("kvpress"),
        },
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
