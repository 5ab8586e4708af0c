"""`python -m experiments.pretrained`: the pretrained-model study (run.py); a bad flag or input
is one line on stderr, as in the `aah` command."""

import sys

from experiments.pretrained.run import main

try:
    code = main()
except ValueError as err:
    print(f"python -m experiments.pretrained: {err}", file=sys.stderr)
    code = 2
sys.exit(code)
