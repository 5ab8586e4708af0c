"""`python -m aah`: the same command line as the `aah` console script."""

from aah.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
