"""Integrations with other libraries, each an optional extra imported only when used.

- `aah.integrations.hf` (a package): per-head windows for Hugging Face transformers models
  (`pip install 'aah-attention[hf]'`; the short path: `aah.hf`). `hf.apply_plan` applies and
  removes plans; its modules hold the attention function (`hf.attention`, any mask by the
  rule in `hf.masks`, simple padding on the fast path in `hf.padding`), model layouts
  (`hf.model_layout`), model loading (`hf.load`), post-hoc plan
  search (`hf.search` on the signals of `hf.signals`, named in `hf.signal_registry`: mass
  given sinks in `hf.sink_mass`, each head's residual-stream change in `hf.output_error`, the loss
  rise of cutting each KV head alone in `hf.cut_loss`, replayed by `hf.layer_replay`; one window per
  KV head under a coverage or KV-byte cap by `controller.allocate`), perplexity sweeps
  (`hf.sweep`) and a per-head KV cache (`hf.cache`). Its CLI logic lives in `aah.cli.hf_plan`,
  its plan heatmap in `aah.report.plan_heatmap`.

Importing this package imports nothing heavy; transformers loads inside the functions.
"""
