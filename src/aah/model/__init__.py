"""The decoder: `GPTConfig` and `GPT` (pure model code, no I/O)."""

from aah.model.config import GPTConfig
from aah.model.gpt import GPT

__all__ = ["GPT", "GPTConfig"]
