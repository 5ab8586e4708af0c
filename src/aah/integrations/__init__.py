"""Integrations with other libraries, each an optional extra imported only when used.

- `aah.integrations.hf`: per-head windows for Hugging Face transformers models
  (`pip install 'aah-attention[hf]'`), with post-hoc plan search (`hf_search`: mass given
  sinks in `hf_mass` or, with `signal="loss"`, the loss rise of cutting each KV head alone in
  `hf_ablation`; one window per KV head under a coverage or KV-byte cap in `hf_allocate`),
  plan files (`hf_plan`), perplexity sweeps and heatmaps (`hf_report`), a per-head KV cache
  (`hf_cache`) and CLI logic (`hf_cli`).

Importing this package imports nothing heavy; transformers loads inside the functions.
"""
