"""Per-head windows on Hugging Face causal LMs through transformers' AttentionInterface.

    from aah.integrations import hf
    hf.apply(model, plan)   # plan[layer][query_head] -> window; model now runs "aah" attention
    hf.apply(model, plan, sinks=4)  # ... and every head also sees the first 4 tokens
    hf.remove(model)        # back to the implementation it had before
    model, tokenizer = hf.load_model("model.gguf")  # a .gguf, a folder, or a hub name

For decoding that keeps only each head's window and sinks, pass a `hf.run.cache.PerHeadCache`
(`hf.per_head_cache(model, max_cache_len)`) to `generate`; `hf.per_head_cache(model,
rolling=True)` never fills (every head bounded: it streams past the model's positions).

Supported families (config.model_type): GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma 3 (GQA
included).
`apply` registers the "aah" attention function (`hf.run.attention.aah_attention_forward`) and its
mask builder, stores each layer's windows on its attention module (`module.aah_windows`), and
switches the model's attention implementation to "aah". Registration is global in transformers
and idempotent; nothing happens at import time. transformers is imported lazily: without it
every function here raises ImportError naming `pip install 'aah-attention[hf]'`.

Two rooms: `hf.run` runs a plan inside transformers, `hf.search` searches one (and imports
`hf.run`, never the reverse). Names only here: `hf.run.apply_plan` holds apply / remove /
applied / probing, `hf.run.model_layout` the families and layouts, `hf.run.load` the loading.
"""

from aah.integrations.hf.run.apply_plan import (
    IMPLEMENTATION,
    applied,
    apply,
    current_plan,
    current_sinks,
    implementation,
    per_head_cache,
    plan_sinks,
    plan_windows,
    probing,
    register,
    remove,
    set_implementation,
)
from aah.integrations.hf.run.load import load_model
from aah.integrations.hf.run.model_layout import FAMILIES, Layout, layout, require_transformers

__all__ = [
    "FAMILIES",
    "IMPLEMENTATION",
    "Layout",
    "applied",
    "apply",
    "current_plan",
    "current_sinks",
    "implementation",
    "layout",
    "load_model",
    "per_head_cache",
    "plan_sinks",
    "plan_windows",
    "probing",
    "register",
    "remove",
    "require_transformers",
    "set_implementation",
]
