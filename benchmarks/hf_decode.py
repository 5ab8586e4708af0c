"""Decode tokens/s and KV MB of PerHeadCache vs DynamicCache on a transformers model.
Same as `aah bench hf-decode`."""

from aah.bench.hf_decode import main

if __name__ == "__main__":
    raise SystemExit(main())
