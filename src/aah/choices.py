"""The named choices the model config shares with the attention package, each once, as a
`Literal` type (torch-free, so configs load without torch).

`typing.get_args` reads the names back: `get_args(Position)` is ("rope", "learned", "none",
"alibi", "relative"); nested Literals flatten in order. The config layer validates a field
typed with one of these from the type itself (aah.training.fields, aah.validate).
"""

from __future__ import annotations

from typing import Literal

#: attention variants with explicit scores (aah.attention.variants.scores).
ScoreVariant = Literal["softmax", "additive", "bilinear"]
#: variants that restrict which keys a query sees (connectivity.py).
ConnectivityVariant = Literal["block-sparse", "global-tokens"]
#: approximations without explicit scores (lowrank.py, kernel.py): no score bias possible.
ApproximationVariant = Literal["low-rank", "kernel", "kernel-favor"]
#: every `model.attention` variant.
Attention = Literal[ScoreVariant, ConnectivityVariant, ApproximationVariant]

#: positions applied as a bias on the scores, inside the windowed attention.
ScoreBiasPosition = Literal["alibi", "relative"]
#: every `model.position` scheme.
Position = Literal["rope", "learned", "none", ScoreBiasPosition]

Norm = Literal["layernorm", "rmsnorm"]

#: what a Hugging Face plan search allocates on (aah.integrations.hf.search.plan_search).
SearchSignal = Literal["output", "mass", "output+retrieval", "retrieval", "loss", "suffix-loss"]

#: the engines of `aah.attention.windowed_attention` (implemented in attention/registry.py).
BackendName = Literal["reference", "dense", "banded", "grouped", "flex", "flash"]
#: `model.backend`: an engine, or "auto" to pick the fastest one available.
BackendChoice = Literal["auto", BackendName]

#: where `aah sweep` runs its cells (aah.sweep.cluster): processes here, Slurm jobs through
#: submitit, or submitit's local executor.
SweepExecutor = Literal["local", "slurm", "submitit-local"]

#: what `aah plan heal` learns (aah.integrations.hf.run.heal_params).
HealParameter = Literal["temperature", "lora", "sink"]
