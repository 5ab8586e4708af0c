"""kvpress's presses on SmolLM2-135M, on the blocks and protocol of `pretrained_peer.py`.

Runs in its own environment (kvpress pins its own transformers; it is not a dependency of
this project); see `pretrained_peer.py` for the commands. For each held-out block the prompt
(the first P tokens) is prefilled by `model.model` inside `with press(model):`, as kvpress's
pipeline does, compressing each layer's DynamicCache to int(P x (1 - compression_ratio))
positions per KV head; the continuation is then fed in one call with `position_ids` counting
on from P (appended uncompressed), and scored teacher-forced with the prompt's last logit
first. compression_ratio = 1 - f. Presses: StreamingLLM (4 sinks + recent tokens: the same
rule as the `uniform` plans), SnapKV (keys ranked by the attention of the prompt's last 64
queries), Knorm (keys with the smallest L2 norm kept) and AdaKV-SnapKV (kvpress's head-wise
wrapper: SnapKV's scores ranked across all heads of a layer, each head keeping at least a
fifth of its share). `full` (no press) checks the protocol against the project's own run on the
same ids.

The bytes each press really holds are measured from the cache after the prompt, not taken
from its ratio: AdaKV keeps every key and value and only masks the pruned ones in attention
(kvpress's attention patch swaps them for keys no query attends to), so it holds the full
cache's bytes; `frees_memory` records, per press, whether the cache shrank.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import torch

from experiments.scripts.pretrained_peer import FRACTIONS, continuation_nll, ids_digest


def cache_bytes(cache: Any) -> int:
    """Bytes of the keys and values a DynamicCache holds (any transformers layout)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        pairs = [(layer.keys, layer.values) for layer in layers]
    else:
        pairs = list(zip(cache.key_cache, cache.value_cache, strict=True))
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in pairs)


@torch.inference_mode()
def run_press(model: Any, blocks: torch.Tensor, prompt: int, press: Any) -> dict[str, Any]:
    from transformers import DynamicCache

    losses, held = [], []
    for ids in blocks:
        ids = ids.unsqueeze(0)
        cache = DynamicCache()
        with press(model) if press is not None else contextlib.nullcontext():
            hidden = model.model(input_ids=ids[:, :prompt], past_key_values=cache).last_hidden_state
        first = model.lm_head(hidden[:, -1:])
        held.append(cache_bytes(cache))
        pos = torch.arange(prompt, ids.shape[1]).unsqueeze(0)
        rest = model(input_ids=ids[:, prompt:], past_key_values=cache, position_ids=pos).logits
        losses.append(continuation_nll(torch.cat([first, rest], dim=1), ids, prompt))
    return {"block_losses": losses, "kv_bytes": sum(held) / len(held)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="the folder of pretrained_peer.py windows")
    p.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import importlib.metadata

    import transformers
    from kvpress import AdaKVPress, KnormPress, SnapKVPress, StreamingLLMPress

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    saved = torch.load(out / "blocks.pt")
    blocks, prompt, where = saved["ids"], int(saved["prompt"]), Path(saved["model"])
    gguf = sorted(where.glob("*.gguf")) if where.is_dir() else [where]
    folder = where if where.is_dir() else where.parent
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=gguf[0].name, attn_implementation="sdpa", dtype=torch.float32
    ).eval()
    start = time.perf_counter()
    full = run_press(model, blocks, prompt, None)
    rows = [{"method": "full", "fraction": 1.0, "kv_after_prompt": 1.0, **full}]
    presses = {
        "kvpress-streaming": lambda r: StreamingLLMPress(compression_ratio=r, n_sink=4),
        "kvpress-snapkv": lambda r: SnapKVPress(compression_ratio=r, window_size=64),
        "kvpress-knorm": lambda r: KnormPress(compression_ratio=r),
        "kvpress-adakv-snapkv": lambda r: AdaKVPress(
            SnapKVPress(compression_ratio=r, window_size=64)
        ),
    }
    for f in args.fractions:
        for name, make in presses.items():
            res = run_press(model, blocks, prompt, make(round(1 - f, 6)))
            held = res["kv_bytes"] / full["kv_bytes"]
            frees = res["kv_bytes"] < full["kv_bytes"]
            rows.append({"method": name, "fraction": f, "kv_after_prompt": held,
                         "frees_memory": frees, **res})  # fmt: skip
            mean = sum(res["block_losses"]) / len(res["block_losses"])
            print(json.dumps({"method": name, "fraction": f, "loss": mean, "kv": held}))
    result = {
        "engine": "kvpress", "ids_digest": ids_digest(blocks), "prompt": prompt,
        "threads": torch.get_num_threads(), "seconds": time.perf_counter() - start,
        "env": {"torch": torch.__version__, "transformers": transformers.__version__,
                "kvpress": importlib.metadata.version("kvpress")},
        "rows": rows,
    }  # fmt: skip
    (out / "kvpress.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
