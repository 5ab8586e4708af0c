"""Per-head windowed causal attention: one signature, several backends, one float64 oracle."""

from aah.attention.api import executed_elements, windowed_attention
from aah.attention.cost import Coverage, coverage
from aah.attention.workspace import release_workspaces, workspace_limit

__all__ = [
    "Coverage",
    "coverage",
    "executed_elements",
    "release_workspaces",
    "windowed_attention",
    "workspace_limit",
]
