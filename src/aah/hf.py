"""Per-head windows inside Hugging Face transformers models: the short path to the integration.

    import aah.hf

    model, tokenizer = aah.hf.load_model("path/to/model.gguf")  # a .gguf, a folder or a hub name
    plan = aah.hf.default_plan(model, kv_fraction=0.3, seq_len=2048)  # shipped, cached or searched
    plan = aah.hf.search_plan(model, kv_fraction=0.3, sinks=4)  # a search of your own
    aah.hf.apply(model, plan)                                    # the plan's windows and sinks
    cache = aah.hf.per_head_cache(model, max_cache_len=4096)     # keeps only what each head reads
    model.generate(ids, cache=cache, max_new_tokens=64)
    cache = aah.hf.per_head_cache(model, rolling=True)   # never fills: past the model's positions
    rows = aah.hf.stream_perplexity(model, ids, cache)   # per chunk: perplexity, KV MB, tokens/s
    aah.hf.remove(model)                                         # back to the model's attention
    healed = aah.hf.heal(model, plan, minutes=20)  # a few learned parameters, distilled
    healed.save("healed.json")                     # + healed.heal.safetensors beside it
    healed = aah.hf.heal(model, plan, options=aah.hf.HealOptions(redecide=aah.hf.Redecide()))

A search's signal is a name (`signal_names()`) or an object carrying its own options:
`search_plan(model, kv_fraction=0.3, signal=aah.hf.Blend((aah.hf.Output(), aah.hf.Retrieval(
prompts=32))))`; `register_signal(name, factory)` adds one (docs/architecture.md).

Everything here is re-exported from `aah.integrations.hf` (docs/hf.md); this module holds no
logic of its own. Importing it imports torch, and transformers only when a function needs it.
"""

from __future__ import annotations

from aah.integrations.hf.run.apply_plan import (
    apply,
    current_plan,
    current_sinks,
    per_head_cache,
    remove,
)
from aah.integrations.hf.run.load import load_model
from aah.integrations.hf.run.streaming import StreamRow, stream_perplexity
from aah.integrations.hf.search.calibration_mix import calibration_mix
from aah.integrations.hf.search.default_plan import default_plan
from aah.integrations.hf.search.heal import HealOptions, heal
from aah.integrations.hf.search.heal_redecide import Redecide
from aah.integrations.hf.search.plan_search import search_plan
from aah.integrations.hf.search.signal_registry import make_signal, register_signal, signal_names
from aah.integrations.hf.search.signals import (
    Blend,
    Loss,
    Mass,
    Output,
    Retrieval,
    SearchContext,
    Signal,
    SuffixLoss,
)
from aah.plan import WindowPlan

__all__ = [
    "Blend",
    "HealOptions",
    "Loss",
    "Mass",
    "Output",
    "Redecide",
    "Retrieval",
    "SearchContext",
    "Signal",
    "StreamRow",
    "SuffixLoss",
    "WindowPlan",
    "apply",
    "calibration_mix",
    "current_plan",
    "current_sinks",
    "default_plan",
    "heal",
    "load_model",
    "make_signal",
    "per_head_cache",
    "register_signal",
    "remove",
    "search_plan",
    "signal_names",
    "stream_perplexity",
]
