"""Per-head window plans on a pretrained LLM against uniform + sinks at equal KV bytes:
the `python -m experiments.pretrained` command (run.py) and its parts."""
