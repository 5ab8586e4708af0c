"""aah: asymmetric attention heads, per-head causal context windows with real savings."""

__version__ = "0.1.0"

__all__ = ["__version__"]
