"""kvpress's presses on this project's RULER samples, as cells next to the project's methods.

    kvpress-venv/bin/python -m experiments.scripts.ruler_kvpress --out DIR --kv-fraction 0.3 \\
        --presses streaming,snapkv,adakv-snapkv --threads 2 [--tasks T1,T2] [--samples N]

Runs in kvpress's own environment (kvpress pins its own transformers; experiments/README.md
says how it is made). DIR is a folder of `experiments.ruler.run`: its samples.jsonl holds the
token ids every method reads, and its cells.jsonl's settings line names the model, T and the
KV fraction. Each sample (in run.py's order: every task's first sample, then every task's
second, ...) is answered as kvpress's own pipeline answers a context and a question: the first
`context_tokens` ids are prefilled by `model.model` inside `with press(model):` into a fresh
DynamicCache, which compresses that context only; the rest of the prompt (question and answer
prefix) is fed uncompressed with position ids counting on from the context's length; then
greedy decoding of the task's tokens to generate, stopped once the text scores 1 (run.py's
`answers_found`: the score cannot drop), or at the model's end-of-sequence token, as
`generate` stops. One cell per (press, task, sample), `kvpress-<press>/<task>/<index>`, is
appended to DIR/cells.jsonl as it finishes; a cell on file is skipped, so a stopped run
resumes. `experiments.ruler.report` then shows the `kvpress-*` columns beside the project's
methods (rerun `experiments.ruler.run` with the same flags to rewrite the table).

`kvpress-full` (no press) answers every sample too: a protocol check against the project's own
`full` cells on the same ids, and the measure of the full cache. It prefills the context into
the model's own cache (`DynamicCache(config=...)`: a sliding-window layer keeps only its
window), whose bytes after the context are the full cache's bytes F. A press prefills into
kvpress's plain DynamicCache, where every layer holds the whole context (P bytes; P = F
without sliding-window layers) and is cut to int(n x (1 - r)) positions per KV head. Equal
bytes: r is chosen so the press holds the share --kv-fraction f of F, r = 1 - f x F / P
(`press_ratio`): 1 - f on a model without sliding layers, more on Gemma 3, whose 5 layers of
every 6 hold 511 positions in F but the whole context in P. Every cell records r, the bytes
the cache really holds after the context and their share of F (`kv_fraction`), and the share
attention can still see (`attended_fraction`): AdaKV keeps every key and value and only masks
the pruned ones (kvpress's attention patch), so it holds P bytes and attends to f x F.

Presses: StreamingLLM (4 sinks and the most recent positions), SnapKV (positions ranked by the
attention of the context's last 64 queries) and AdaKV-SnapKV (SnapKV's scores ranked across a
layer's heads, each head keeping at least a fifth of its share).

On a model with sliding-window layers kvpress 0.5.5 runs as it is, and what it does there is
what these cells score (`sliding_note`): it skips sliding layers only for
Gemma3ForConditionalGeneration, so on Gemma3ForCausalLM (Gemma 3 270M) it cuts them too; the
model's own cache cannot be used (a press leaves a sliding layer's length and its mask sizes
apart, and the question's forward fails on mismatched sizes); in the plain cache a sliding
layer's mask counts cache slots, not positions, so it sees the last 512 slots kept, and the
presses that cut (StreamingLLM, SnapKV) store the kept positions in score order, not position
order, so those slots are an arbitrary subset once more than 512 are kept, and when fewer are
kept they reach back past the layer's window (the sinks among them), which the model never saw.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

PREFIX = "kvpress-"
FULL = "full"
PRESSES = ("streaming", "snapkv", "adakv-snapkv")
SINKS, SNAP_WINDOW = 4, 64


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help="a folder of experiments.ruler.run")
    p.add_argument("--kv-fraction", type=float, help="default: the folder's own")
    p.add_argument("--presses", default=",".join(PRESSES), help=f"of {', '.join(PRESSES)}")
    p.add_argument("--tasks", help="default: every task in samples.jsonl")
    p.add_argument("--samples", type=int, help="samples per task (default: all on file)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--decode-all", action="store_true", help="as experiments.ruler.run's")
    return p.parse_args(argv)


def parse_presses(text: str) -> list[str]:
    """The comma-separated press names, `full` first; ValueError naming an unknown one."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in (FULL, *PRESSES):
            raise ValueError(f"unknown press {name!r}; known: {', '.join(PRESSES)}")
    return list(dict.fromkeys([FULL, *names]))


def sliding_note(config: Any) -> str | None:
    """A line saying how kvpress treats the model's sliding-window layers (None without any)."""
    types = list(getattr(config, "layer_types", None) or [])
    sliding = sum(t == "sliding_attention" for t in types)
    if not sliding:
        return None
    return (
        f"note: {sliding} of {len(types)} layers slide over {config.sliding_window} positions; "
        "kvpress cuts them too in a plain cache, where their mask counts cache slots, and "
        "StreamingLLM and SnapKV keep positions in score order (module docstring)"
    )


def press_ratio(kv_fraction: float, full_bytes: float, plain_bytes: float) -> float:
    """The compression ratio r that leaves a press holding `kv_fraction` of `full_bytes` (the
    model's own cache after the context) when it cuts every layer of `plain_bytes` (every layer
    holding the whole context) by r; 0 where no cut is needed."""
    if not 0 < kv_fraction <= 1:
        raise ValueError(f"--kv-fraction must be in (0, 1], got {kv_fraction}")
    if full_bytes <= 0 or plain_bytes < full_bytes:
        raise ValueError(f"bad cache bytes: full {full_bytes}, every layer whole {plain_bytes}")
    return max(0.0, round(1 - kv_fraction * full_bytes / plain_bytes, 6))


def read_settings(out: Path) -> dict[str, Any]:
    """The settings line of out/cells.jsonl; ValueError when `out` is no RULER run folder."""
    from aah.records import read_jsonl

    for name in ("samples.jsonl", "cells.jsonl"):
        if not (out / name).is_file():
            raise ValueError(f"--out {str(out)!r} holds no {name}: run experiments.ruler.run first")
    rows = read_jsonl(out / "cells.jsonl")
    settings = rows[0].get("settings") if rows else None
    if not isinstance(settings, dict) or "model" not in settings:
        raise ValueError(f"{out / 'cells.jsonl'} has no settings line naming the model")
    return settings


def check_fraction(given: float | None, settings: dict[str, Any]) -> float:
    """The KV fraction to match: the folder's; ValueError if --kv-fraction names another."""
    own = float(settings["kv_fraction"])
    if given is not None and abs(given - own) > 1e-9:
        raise ValueError(
            f"--kv-fraction {given} differs from the folder's kv_fraction {own}: its cells "
            "compare methods at one budget; use another --out folder for another fraction"
        )
    return own


def chosen_samples(out: Path, settings: dict[str, Any], tasks: str | None,
                   count: int | None) -> list[Any]:  # fmt: skip
    """The samples to answer, in run.py's order; ValueError for a task or count not on file or
    a sample made for other settings."""
    from experiments.ruler.samples import read_samples

    samples = read_samples(out / "samples.jsonl")
    on_file = list(dict.fromkeys(s.task for s in samples))
    names = on_file if tasks is None else [t.strip() for t in tasks.split(",") if t.strip()]
    for task in names:
        if task not in on_file:
            raise ValueError(f"task {task!r} has no samples in {out}; on file: {on_file}")
    if count is not None and count < 1:
        raise ValueError(f"--samples must be >= 1, got {count}")
    chosen = [s for s in samples if s.task in names and (count is None or s.index < count)]
    for task in names:
        have = sum(s.task == task for s in chosen)
        if count is not None and have < count:
            raise ValueError(f"--samples {count}: {task} has {have} in {out}; make them with "
                             "experiments.ruler.run --samples first")  # fmt: skip
    for s in chosen:
        made = (s.seq_len, s.seed, s.template)
        if made != (settings["seq_len"], settings["seed"], settings["template"]):
            raise ValueError(f"{s.task} #{s.index} was made for (seq_len, seed, template) {made}")
        if not 0 < s.context_tokens < len(s.input_ids):
            raise ValueError(f"{s.task} #{s.index}: context_tokens {s.context_tokens} out of range")
    return sorted(chosen, key=lambda s: (s.index, names.index(s.task)))


def make_press(name: str, ratio: float) -> Any:
    """kvpress's press `name` at compression ratio `ratio` (None for full)."""
    if name == FULL:
        return None
    if name not in PRESSES:
        raise ValueError(f"unknown press {name!r}; known: {', '.join(PRESSES)}")
    from kvpress import AdaKVPress, SnapKVPress, StreamingLLMPress

    if name == "streaming":
        return StreamingLLMPress(compression_ratio=ratio, n_sink=SINKS)
    snap = SnapKVPress(compression_ratio=ratio, window_size=SNAP_WINDOW)
    return snap if name == "snapkv" else AdaKVPress(snap)


def load(name: str) -> tuple[Any, Any]:
    """The model (float32, sdpa, eval) and its tokenizer, as pretrained_peer_kvpress loads them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aah.integrations.hf.run.load import resolve_source

    source = resolve_source(name)
    extra = {} if source.gguf_file is None else {"gguf_file": source.gguf_file}
    model = AutoModelForCausalLM.from_pretrained(
        source.location, attn_implementation="sdpa", dtype=torch.float32, **extra
    )
    return model.eval(), AutoTokenizer.from_pretrained(source.location, **extra)


def layer_sizes(cache: Any) -> list[tuple[int, int]]:
    """(bytes, positions) of each layer's keys and values in a DynamicCache."""
    return [(layer.keys.nbytes + layer.values.nbytes, layer.keys.shape[-2])
            for layer in cache.layers]  # fmt: skip


def masked_bytes(model: Any, cache: Any) -> int:
    """Bytes of the keys and values AdaKV masks after a prefill (0 for any other press: the
    attention patch clears the masks at every prefill)."""
    unit = 2 * cache.layers[0].keys.element_size()  # a key and a value, per element
    total = 0
    for layer in getattr(model.model, "language_model", model.model).layers:
        masked = getattr(layer.self_attn, "masked_key_indices", None)
        if masked is not None:
            total += len(masked[0]) * layer.self_attn.head_dim * unit
    return total


def answers_found(decode: Any, sample: Any, early_stop: bool) -> Any:
    """tokens made -> whether they already score 1 (run.py's `answers_found`; never when not
    `early_stop`)."""
    from experiments.ruler.scoring import score

    def found(made: list[int]) -> bool:
        return early_stop and score(sample.metric, decode(made), sample.answers) == 1.0

    return found


def greedy(model: Any, cache: Any, rest: Any, start: int, limit: int, stop: Any) -> list[int]:
    """Feed `rest` (positions from `start` on) after the cache, then greedy tokens until
    `limit`, an end-of-sequence id or `stop(tokens made)`."""
    import torch

    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    ids, position = rest, torch.arange(start, start + rest.shape[1]).unsqueeze(0)
    made: list[int] = []
    while True:
        logits = model(input_ids=ids, past_key_values=cache, position_ids=position,
                       logits_to_keep=1).logits  # fmt: skip
        made.append(int(logits[0, -1].argmax()))
        if made[-1] in eos or len(made) >= limit or stop(made):
            return made
        ids, position = torch.tensor([made[-1:]]), position[:, -1:] + 1


def answer(model: Any, decode: Any, sample: Any, press: Any, early_stop: bool) -> dict[str, Any]:
    """One sample through `press` (None: full, in the model's own cache): the prediction, its
    score, the tokens made, the seconds, and the cache's bytes and lengths after the context."""
    import contextlib

    import torch
    from transformers import DynamicCache

    from experiments.ruler.scoring import score

    ids, context = torch.tensor([sample.input_ids]), sample.context_tokens
    cache = DynamicCache(config=model.config) if press is None else DynamicCache()
    found = answers_found(decode, sample, early_stop)
    start = time.perf_counter()
    with torch.inference_mode():
        with press(model) if press is not None else contextlib.nullcontext():
            model.model(input_ids=ids[:, :context], past_key_values=cache)
        sizes, masked = layer_sizes(cache), masked_bytes(model, cache)
        prefill = time.perf_counter() - start
        made = greedy(model, cache, ids[:, context:], context, sample.tokens_to_generate, found)
    prediction = decode(made)
    return {
        "score": score(sample.metric, prediction, sample.answers), "prediction": prediction,
        "new_tokens": len(made), "seconds": time.perf_counter() - start,
        "prefill_seconds": prefill, "kv_bytes": sum(b for b, _ in sizes),
        "attended_bytes": sum(b for b, _ in sizes) - masked,
        "layer_positions": [n for _, n in sizes], "context_tokens": context,
        "plain_kv_bytes": sum(b // max(n, 1) * context for b, n in sizes),
    }  # fmt: skip


def press_cell(cell: dict[str, Any], full: dict[str, Any], ratio: float) -> dict[str, Any]:
    """A press's cell with its ratio and its bytes as shares of the full cache's."""
    return {
        **cell, "compression_ratio": ratio, "full_kv_bytes": full["kv_bytes"],
        "kv_fraction": cell["kv_bytes"] / full["kv_bytes"],
        "attended_fraction": cell["attended_bytes"] / full["kv_bytes"],
        "frees_memory": cell["kv_bytes"] < full["plain_kv_bytes"],
    }  # fmt: skip


def answer_cell(model: Any, decode: Any, sample: Any, name: str, cells: Any,
                fraction: float, early_stop: bool) -> dict[str, Any]:  # fmt: skip
    """The cell of press `name` on `sample`, at the ratio its `kvpress-full` cell's bytes give
    (that cell comes first: `parse_presses` puts full first)."""
    if name == FULL:
        return answer(model, decode, sample, None, early_stop)
    full = cells.get(f"{PREFIX}{FULL}/{sample.task}/{sample.index}")
    ratio = press_ratio(fraction, full["kv_bytes"], full["plain_kv_bytes"])
    cell = answer(model, decode, sample, make_press(name, ratio), early_stop)
    return press_cell(cell, full, ratio)


def run(args: argparse.Namespace) -> None:
    """Answer every missing cell of the chosen samples and presses."""
    import torch

    from aah.cli.hf.stream import decoder
    from experiments.pretrained.cells import CellStore

    presses = parse_presses(args.presses)
    settings = read_settings(args.out)
    fraction = check_fraction(args.kv_fraction, settings)
    samples = chosen_samples(args.out, settings, args.tasks, args.samples)
    cells = CellStore(args.out / "cells.jsonl", settings)
    keys = [(s, f"{PREFIX}{n}/{s.task}/{s.index}", n) for s in samples for n in presses]
    todo = [(s, key, n) for s, key, n in keys if key not in cells]
    print(f"{len(todo)} of {len(keys)} cells to answer", flush=True)
    if not todo:
        return
    torch.set_num_threads(args.threads)
    model, tokenizer = load(settings["model"])
    decode = decoder(tokenizer)
    note = sliding_note(model.config)
    if note:
        print(note, flush=True)
    for sample, key, name in todo:
        cell = answer_cell(model, decode, sample, name, cells, fraction, not args.decode_all)
        cells.put(key, cell)
        r, share = cell.get("compression_ratio", 0.0), cell.get("kv_fraction", 1.0)
        print(f"{sample.task} #{sample.index} {key.split('/')[0]} (r {r:.4f}, KV {share:.3f}): "
              f"{100 * cell['score']:.0f} in {cell['seconds']:.1f} s | "
              f"{cell['prediction'][:60]!r}", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    run(parse(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
