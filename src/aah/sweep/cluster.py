"""Where a sweep's cells run: local processes (the default) or jobs through submitit.

`ClusterOptions` holds the executor and its settings, checked before anything is submitted:

- `local`: one `aah train` child process per cell on this machine (`cell_process`).
- `slurm`: one Slurm job per cell through submitit (`pip install 'aah-attention[cluster]'`),
  with `--slurm-partition`, `--slurm-time` (minutes), `--gpus-per-cell`, `--cpus-per-cell`,
  and any other sbatch setting submitit knows in the suite's `[slurm]` table (for example
  `account = "lab"`, `qos = "high"`, `constraint = "a100"`); an unknown key is an error that
  names it.
- `submitit-local`: the very same path through submitit's local executor (no Slurm): what a
  user without a cluster, and the tests, run to try it.

submitit is imported only when a submitit executor is asked for, so without the extra
nothing changes for a user of `aah sweep`.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from aah.choices import SweepExecutor

EXECUTORS: tuple[str, ...] = get_args(SweepExecutor)
#: settings the flags own; the `[slurm]` table may not set them a second way
FLAG_KEYS = frozenset(
    {"partition", "time", "gpus_per_node", "cpus_per_task", "nodes", "ntasks_per_node"}
)
INSTALL_HINT = "pip install 'aah-attention[cluster]'"


@dataclass(frozen=True)
class ClusterOptions:
    """The executor of a sweep and its job settings (every field has a default)."""

    executor: SweepExecutor = "local"
    partition: str | None = None
    time_min: int | None = None
    gpus_per_cell: int = 0
    cpus_per_cell: int | None = None
    #: the suite's `[slurm]` table: further sbatch settings, passed to submitit as they are
    slurm: dict[str, Any] = field(default_factory=dict)

    @property
    def submitted(self) -> bool:
        """Whether cells run as submitit jobs (slurm or submitit-local)."""
        return self.executor != "local"

    def check(self) -> ClusterOptions:
        """ValueError naming the first bad setting; run before anything is submitted."""
        if self.executor not in EXECUTORS:
            raise ValueError(
                f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}"
            )
        if self.executor == "local":
            flags = {"--slurm-partition": self.partition, "--slurm-time": self.time_min,
                     "--gpus-per-cell": self.gpus_per_cell or None,
                     "--cpus-per-cell": self.cpus_per_cell}  # fmt: skip
            given = [name for name, value in flags.items() if value is not None]
            if given:
                raise ValueError(
                    f"{', '.join(given)} only apply to --executor slurm or submitit-local "
                    "(the local executor runs each cell as a process on this machine)"
                )
        if self.partition is not None and (not isinstance(self.partition, str) or
                                           not self.partition.strip()):  # fmt: skip
            raise ValueError(f"--slurm-partition must be a name, got {self.partition!r}")
        for name, value, low in (("--slurm-time", self.time_min, 1),
                                 ("--gpus-per-cell", self.gpus_per_cell, 0),
                                 ("--cpus-per-cell", self.cpus_per_cell, 1)):  # fmt: skip
            bad = isinstance(value, bool) or not isinstance(value, int) or value < low
            if value is not None and bad:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.slurm and self.executor == "local":
            raise ValueError(
                "the suite's [slurm] table only applies to --executor slurm or submitit-local"
            )
        if self.submitted:
            check_slurm_table(self.slurm)
        if self.executor == "slurm" and shutil.which("srun") is None:
            raise ValueError(
                "--executor slurm: no Slurm on this machine (srun not found); run the sweep on "
                "the cluster's login node, or try the same path here with --executor "
                "submitit-local"
            )
        if self.executor == "slurm" and self.time_min is None:
            raise ValueError(
                "--executor slurm needs --slurm-time MIN, each job's time limit (submitit's own "
                "default is 5 minutes); a cell that runs out checkpoints and is requeued"
            )
        return self

    def executor_for(self, folder: Path) -> Any:
        """A submitit executor writing its own logs under `folder`, with these settings."""
        submitit = import_submitit(self.executor)
        cluster = "slurm" if self.executor == "slurm" else "local"
        executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
        # One task per cell: a cell with several GPUs starts its own DDP processes (torchrun),
        # as `aah train` does on one machine.
        params: dict[str, Any] = {"nodes": 1, "tasks_per_node": 1}
        if self.gpus_per_cell:
            params["gpus_per_node"] = self.gpus_per_cell
        if self.cpus_per_cell:
            params["cpus_per_task"] = self.cpus_per_cell
        if self.time_min:
            params["timeout_min"] = self.time_min
        elif self.executor == "submitit-local":  # it kills a job at its timeout (default 5 min)
            params["timeout_min"] = 60 * 24 * 365
        if self.executor == "slurm":
            if self.partition:
                params["slurm_partition"] = self.partition
            params.update({f"slurm_{key}": value for key, value in self.slurm.items()})
        executor.update_parameters(**params)
        return executor


def import_submitit(executor: str) -> Any:
    """submitit, or ValueError saying how to install it."""
    try:
        import submitit
    except ImportError:
        raise ValueError(
            f"--executor {executor} needs submitit, which is not installed: {INSTALL_HINT}"
        ) from None
    return submitit


def check_slurm_table(table: dict[str, Any]) -> None:
    """ValueError naming the `[slurm]` keys submitit's Slurm executor does not know, or that
    a flag owns."""
    if not isinstance(table, dict):
        raise ValueError(f"[slurm] must be a table of sbatch settings, got {table!r}")
    owned = sorted(set(table) & FLAG_KEYS)
    if owned:
        raise ValueError(
            f"[slurm]: {', '.join(map(repr, owned))} are set by the flags (--slurm-partition, "
            "--slurm-time, --gpus-per-cell, --cpus-per-cell); one cell is one node"
        )
    submitit = import_submitit("slurm")
    known = set(submitit.SlurmExecutor._valid_parameters())  # the sbatch keys it writes
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(
            f"[slurm]: unknown key(s) {', '.join(map(repr, unknown))}; submitit's Slurm executor "
            f"knows {', '.join(sorted(known - FLAG_KEYS))}"
        )
    for key, value in table.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"[slurm].{key} must be finite, got {value!r}")
