"""Training: the loop (loop.py, one optimizer step in step.py) over a `TrainState`
(state.py); checkpoints and loading a finished run (checkpoint.py, session.py, load.py); the
run-directory lock, resume checks and DDP helpers.

Nothing is imported here, so `import aah.train.checkpoint` stays as light as that module.
"""
