"""Control branch: per-head features -> EMA -> hierarchy -> scorer -> per-head window plan.

The controller never imports the model or the training loop: it takes detached (q, k, v)
tensors per layer and returns plain `Plan`s (`windows[layer][head]`).
"""

from aah.controller.config import POLICIES, ControllerConfig
from aah.controller.policies import make_policy
from aah.controller.protocol import QKV, Policy
from aah.controller.shuffle import Shuffled

__all__ = [
    "POLICIES",
    "QKV",
    "ControllerConfig",
    "Policy",
    "Shuffled",
    "make_policy",
]
