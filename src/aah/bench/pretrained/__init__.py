"""Per-head window plans on a pretrained LLM against uniform + sinks at equal KV bytes:
the `aah bench pretrained` command (run.py) and its parts."""
