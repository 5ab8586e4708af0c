"""Decode tokens/s and KV bytes: per-head KV cache vs a full cache. Same as `aah bench decode`."""

from aah.bench.decode import main

if __name__ == "__main__":
    raise SystemExit(main())
