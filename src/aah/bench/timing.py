"""Timing and memory helpers shared by the benchmarks.

The machine is shared and noisy: cases are timed interleaved with their baseline (A B A B),
reported as medians, and compared as ratios taken within the same rounds.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable


def interleaved_medians(
    fns: dict[str, Callable[[], object]],
    reps: int,
    warmup: int = 1,
    answers: dict[str, object] | None = None,
) -> dict[str, float]:
    """Median seconds of each callable, run round-robin so drift hits all of them alike;
    `answers`, when given, receives each callable's last return value (to compare them)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            answer = fn()
            samples[name].append(time.perf_counter() - start)
            if answers is not None:
                answers[name] = answer
    return {name: statistics.median(times) for name, times in samples.items()}


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Reset the kernel's high-water RSS mark (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """High-water resident set size since the last reset (VmHWM), else since process start."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_in_subprocess(args: list[str], timeout: float = 600) -> dict:
    """Run `python -m <module> ...` in a fresh process; it prints one JSON line last."""
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory probe failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def environment() -> dict:
    """Versions and threads a figure depends on; transformers' version where it is installed
    (the HF benchmarks' numbers move with it)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    env = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    with contextlib.suppress(PackageNotFoundError):
        env["transformers"] = version("transformers")
    return env
