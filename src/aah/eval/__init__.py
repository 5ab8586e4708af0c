"""Evaluation: losses, bits per byte, cost diagnostics, window maps."""

from aah.eval.evaluate import evaluate_loss, peak_rss_mb, plan_diagnostics
from aah.eval.windowmap import window_map

__all__ = ["evaluate_loss", "peak_rss_mb", "plan_diagnostics", "window_map"]
