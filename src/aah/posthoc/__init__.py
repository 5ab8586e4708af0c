"""Post-hoc allocation over finished runs: per-head plans imposed on a trained model at a
matched coverage (plans.py), scored on the validation split (analysis.py), summarised over
runs (report.py). Reads run directories, so it sits above training and evaluation."""
