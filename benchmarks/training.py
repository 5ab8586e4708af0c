"""Training tokens/s: full vs budget-like vs fixed T/4 plans. Same as `aah bench training`.

Usage: python benchmarks/training.py [--seq-lens 1024,4096] [--batch-size 2] [--steps 3]
Prints a table; the last stdout line is one JSON object.
"""

from aah.bench.training import main

if __name__ == "__main__":
    raise SystemExit(main())
