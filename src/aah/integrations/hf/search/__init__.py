"""Searching a plan for a transformers model: measuring what each head needs, and choosing.

- `plan_search`: `search_plan` and `search_budget`, the entry points.
- Signals (what a head's context is worth): `signals` (the Signal types and SearchContext),
  `signal_registry` (names -> factories), measured by `measure`: attention mass given sinks
  (`sink_mass`), each head's residual-stream change (`output_error`), the loss rise of cutting
  one KV head (`cut_loss`, `suffix_loss`, replayed by `layer_replay`).
- Text to measure on: `calibration_mix` (the shipped mix, drawn by `text_blocks`), cut into
  blocks by `calibration_text`, and `retrieval_calib` (retrieval prompts).
- Candidates and the choice: `plan_candidates` (uniform windows, hybrid layouts),
  `plan_allocation` (a signal's costs -> a plan), `plan_choice` (held-out scoring),
  `search_choice` (the rule that picks one), `plan_refine` (the optional refine step).
- `sweep`: held-out perplexity across budgets.
- After the search: `heal` (a short distillation of a few parameters toward full attention),
  `plan_cache` and `default_plan` (a plan without the wait: shipped, cached or searched once).

The search imports the running side (`aah.integrations.hf.run`), never the reverse.
"""
