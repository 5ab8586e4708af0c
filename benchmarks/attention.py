"""Attention backends vs SDPA is_causal on CPU. Same as `aah bench attention`; see --help."""

from aah.bench.attention import main

if __name__ == "__main__":
    raise SystemExit(main())
