"""Integrations with other libraries, each an optional extra imported only when used.

- `aah.integrations.hf` (a package): per-head windows for Hugging Face transformers models
  (`pip install 'aah-attention[hf]'`; the short path: `aah.hf`), in two rooms:
  `hf.run` runs a plan inside transformers (the attention function, masks, padding, the
  per-head KV cache, apply / remove, loading, model layouts, chat templates) and `hf.search`
  searches one (signals, measurements, calibration text, candidates, the choice, refine, the
  budget sweep). The search imports the running side, never the reverse. The CLI's commands
  on these models live in `aah.cli.hf`, the plan heatmap in `aah.report.plan_heatmap`.

Importing this package imports nothing heavy; transformers loads inside the functions.
"""
