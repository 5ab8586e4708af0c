"""RULER's download-free tasks through this project's methods, resumable sample by sample.

    python -m experiments.ruler.run --model M --out DIR --seq-len 4096 \\
        --tasks niah_single_1,niah_multikey_2,niah_multikey_3,vt,cwe,fwe --samples N \\
        --methods full,uniform-s0,uniform-s4,default --kv-fraction 0.3 --threads 2

The samples are made once for the model's tokenizer (DIR/samples.jsonl, `samples`; a larger
--samples later adds to them), then each method answers each sample: greedy decoding of the
task's tokens to generate, scored by RULER's metric. One cell per (method, task, sample) is
appended to DIR/cells.jsonl as it finishes, so a stopped run resumes where it stopped; the
loop goes sample by sample over all methods, so a partial run compares like with like.

Methods, all at the same KV bytes (a fraction --kv-fraction of the model's own full cache at
T = --seq-len):
- `full`: no plan, transformers' own cache;
- `uniform-sN`: one window for every head, the widest that fits with N sinks;
- `default`: `aah.hf.search_plan(model, kv_fraction=F, seq_len=T)` with no other argument, as
  a user calls it; saved to DIR/plans/default.json and reused;
- `plan:PATH`: any plan file.
A plan runs through `apply` and the per-head cache (`hf.per_head_cache`), as `aah generate`
decodes. Decoding stops once the text made scores 1 (`answers_found`: the same scores as
decoding every token, --decode-all, at a fraction of the time when a model is right).
DIR/table.md and DIR/results.json: each task's score per method with its interval and the
mean over the tasks where full attention is well above zero (`report`).
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

from experiments.ruler.prompts import TEMPLATES

DEFAULT_TASKS = "niah_single_1,niah_multikey_2,niah_multikey_3,vt,cwe,fwe"
_UNIFORM = re.compile(r"uniform-s(\d+)")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="model folder, GGUF file or hub name (default: SmolLM2)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--tasks", default=DEFAULT_TASKS)
    p.add_argument("--samples", type=int, default=10, help="samples per task")
    p.add_argument("--methods", default="full,uniform-s0,uniform-s4,default")
    p.add_argument("--kv-fraction", type=float, default=0.3)
    p.add_argument("--template", choices=TEMPLATES, default="raw")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--decode-all", action="store_true",
        help="decode every token to generate, also after the answer is complete (same scores)",
    )  # fmt: skip
    return p.parse_args(argv)


def parse_methods(text: str) -> list[str]:
    """The comma-separated methods, checked; ValueError naming an unknown one."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise ValueError("--methods names no method")
    for name in names:
        known = name in ("full", "default") or _UNIFORM.fullmatch(name)
        if not known and not (name.startswith("plan:") and len(name) > len("plan:")):
            raise ValueError(
                f"unknown method {name!r}; known: full, uniform-sN (N sinks), default, plan:PATH"
            )
    return list(dict.fromkeys(names))


def method_plan(name: str, model: Any, args: argparse.Namespace, cells: Any) -> Any:
    """The plan of method `name` (None for full attention)."""
    from aah.integrations.hf.search.plan_candidates import uniform_plan
    from aah.integrations.hf.search.plan_search import search_budget
    from aah.plan import WindowPlan

    if name == "full":
        return None
    if name.startswith("plan:"):
        return WindowPlan.load(name.removeprefix("plan:"))
    uniform = _UNIFORM.fullmatch(name)
    if uniform:
        sinks = int(uniform.group(1))
        budget = search_budget(model, args.seq_len, sinks, kv_fraction=args.kv_fraction)
        plan = uniform_plan(budget, type(model).__name__)
        if plan is None:
            raise ValueError(f"{name}: KV {args.kv_fraction} at T {args.seq_len} holds no window")
        return plan
    from experiments.pretrained.default_search import default_plan

    return default_plan(model, args.out, args.kv_fraction, args.seq_len, cells)


class Clock:
    """A `generate` streamer that only notes when each put arrives: the first is the prompt,
    the second the first new token, so their gap is the prefill's time."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def answers_found(decode: Any, prompt_len: int, metric: str, references: list[str]) -> Any:
    """A `generate` stopping criterion: stop once the text made so far scores 1.

    Both metrics ask whether references occur in the text, so more text can never lower a
    score of 1: stopping there leaves every score as decoding all the tokens gives it, and
    saves the rest of the tokens (most of a sample's time on a CPU) whenever a model is right.
    """
    from transformers import StoppingCriteria

    from experiments.ruler.scoring import score

    class AnswersFound(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            import torch

            made = decode([int(i) for i in input_ids[0, prompt_len:].tolist()])
            done = score(metric, made, references) == 1.0
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool,
                              device=input_ids.device)  # fmt: skip

    return AnswersFound()


def answer(
    model: Any, tokenizer: Any | None, sample: Any, plan: Any, early_stop: bool = True
) -> dict[str, Any]:
    """Greedy decoding of the sample's tokens under `plan` (None: full attention), stopped
    once the answer is complete (`answers_found`) unless not `early_stop`: the prediction, its
    score, the tokens made, the seconds (in all, and of the prefill), and the per-head cache's
    bytes."""
    import torch

    from aah.cli.hf.stream import cache_argument, decoder, pad_id
    from aah.integrations.hf.run.apply_plan import applied, per_head_cache
    from experiments.ruler.scoring import score

    ids = torch.tensor([sample.input_ids], dtype=torch.long)
    new, decode = sample.tokens_to_generate, decoder(tokenizer)
    clock = Clock()
    options = {
        "attention_mask": torch.ones_like(ids), "max_new_tokens": new, "do_sample": False,
        "pad_token_id": pad_id(model, tokenizer), "streamer": clock,
    }  # fmt: skip
    if early_stop:
        from transformers import StoppingCriteriaList

        found = answers_found(decode, ids.shape[1], sample.metric, sample.answers)
        options["stopping_criteria"] = StoppingCriteriaList([found])
    held = None
    start = time.perf_counter()
    with torch.inference_mode():
        if plan is None:
            result = model.generate(ids, **options)
        else:
            with applied(model, plan.windows, sinks=plan.sinks or 0):
                cache = per_head_cache(model, max_cache_len=ids.shape[1] + new)
                result = model.generate(ids, **options, **cache_argument(model, cache))
                held = cache.nbytes()
    seconds = time.perf_counter() - start
    prefill = clock.times[1] - start if len(clock.times) > 1 else seconds
    new_ids = [int(i) for i in result[0, ids.shape[1] :].tolist()]
    prediction = decode(new_ids)
    return {
        "score": score(sample.metric, prediction, sample.answers), "prediction": prediction,
        "new_tokens": len(new_ids), "seconds": seconds, "prefill_seconds": prefill,
        "kv_bytes": held,
    }  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Make or read the samples, answer every missing cell, write the report; its results."""
    import torch

    from aah.integrations.hf.run.load import load_model, load_tokenizer
    from experiments.pretrained.cells import CellStore
    from experiments.pretrained.model_files import default_model
    from experiments.ruler.prompts import PromptFormat
    from experiments.ruler.report import write_report
    from experiments.ruler.samples import sample_file
    from experiments.ruler.tasks import parse_tasks

    tasks, methods = parse_tasks(args.tasks), parse_methods(args.methods)
    if args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    torch.set_num_threads(args.threads)
    model_name = args.model or default_model()
    tokenizer = load_tokenizer(model_name)
    prompt_format = PromptFormat(tokenizer, args.template)
    start = time.perf_counter()
    samples = sample_file(args.out / "samples.jsonl", tasks, args.samples, args.seq_len,
                          args.seed, prompt_format)  # fmt: skip
    print(f"{len(samples)} samples ready in {time.perf_counter() - start:.1f} s", flush=True)
    settings = {"model": model_name, "seq_len": args.seq_len, "seed": args.seed,
                "template": args.template, "kv_fraction": args.kv_fraction}  # fmt: skip
    cells = CellStore(args.out / "cells.jsonl", settings)
    model, tokenizer = load_model(model_name, tokenizer=tokenizer)
    plans = {name: method_plan(name, model, args, cells) for name in methods}
    for name, plan in plans.items():
        if plan is not None and not name.startswith("plan:"):
            plan.save(args.out / "plans" / f"{name}.json")
    by_index = sorted(samples, key=lambda s: (s.index, tasks.index(s.task)))
    for sample in by_index:  # every task's first sample, then every task's second, ...
        for name, plan in plans.items():
            key = f"{name}/{sample.task}/{sample.index}"
            if key in cells:
                continue
            cell = answer(model, tokenizer, sample, plan, early_stop=not args.decode_all)
            cells.put(key, cell)
            print(f"{sample.task} #{sample.index} {name}: {100 * cell['score']:.0f} in "
                  f"{cell['seconds']:.1f} s | {cell['prediction'][:70]!r}", flush=True)  # fmt: skip
    return write_report(args, samples, cells, plans, model)


def main(argv: list[str] | None = None) -> int:
    run(parse(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
