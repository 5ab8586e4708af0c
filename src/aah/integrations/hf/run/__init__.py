"""Running a plan inside transformers: everything a planned model needs at inference.

- `apply_plan`: apply / remove / applied; a plan's windows and sinks stored on each attention
  module, and the per-head cache built for it (`per_head_cache`).
- `attention`: the "aah" attention function transformers calls; `masks` builds the masks it
  reads by the windowed rule; `padding` handles simple left padding on the fast path.
- `cache`: the per-head KV cache that keeps only what each head reads.
- `model_layout`: the supported families and their layouts (heads, KV heads, sliding layers).
- `load`, `gguf_file`, `model_preview`: loading a .gguf, a folder or a hub name, and reading a
  model's shape from its files before the weights load.
- `data`: text to token batches, BOS first as a prompt is read.
- `chat_template`, `conversation`: chat prompts and the turns of a conversation.

Nothing here imports the search side (`aah.integrations.hf.search`); tests/test_layers.py
holds that rule.
"""
