#!/bin/bash
# transformers' Llama model tests, once with sdpa and once with every sdpa call routed to "aah".
# usage: run.sh TRANSFORMERS_CHECKOUT [pytest args]   (needs pytest-timeout and parameterized)
# Writes sdpa.txt and aah.txt here and prints each run's summary line and the tests that fail
# with "aah" but pass with sdpa.
set -euo pipefail
checkout=$(cd "$1" && pwd); shift
here=$(cd "$(dirname "$0")" && pwd)
for route in 0 1; do
    label=$([ $route = 1 ] && echo aah || echo sdpa)
    (cd "$checkout" && AAH_ROUTE=$route PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        OMP_NUM_THREADS=1 python -m pytest -p route_aah -p version_shims -q -rfE -v -o addopts="" \
        --timeout 300 tests/models/llama/test_modeling_llama.py "$@" > "$here/$label.txt" 2>&1) || true
    echo "$label: $(tail -n 1 "$here/$label.txt")"
done
grep -h "aah routed calls" "$here/aah.txt" || echo "aah: no call routed"
comm -13 <(grep -E '^FAILED' "$here/sdpa.txt" | cut -d' ' -f2 | sort) \
         <(grep -E '^FAILED' "$here/aah.txt" | cut -d' ' -f2 | sort) | sed 's/^/fails only with aah: /'
