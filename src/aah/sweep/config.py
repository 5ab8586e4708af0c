"""`SweepConfig`: the `[sweep]` table of a suite TOML, and the grid of cells it expands to.

A suite file is an ordinary run config (`[model]`, `[train]`, `[data]`, `[controller]`) plus
a `[sweep]` table that only `aah sweep` reads:

    [sweep]
    name = "screening"          # default: the file's stem; names results/<name>.csv
    regimes = ["full", "fixed", "budget"]
    seeds = [0, 1, 2]

    [sweep.variants."budget-0.5"]   # optional: a regime that is not a bare policy name
    "controller.policy" = "budget"
    "controller.budget" = 0.5

    [slurm]                         # optional: sbatch settings for `--executor slurm`
    account = "lab"                 # (aah.sweep.cluster; passed to submitit as they are)

A regime is a policy name (controller.policy) or a variant (dotted overrides). A seed sets
both train.seed and controller.seed, so every regime sees the same data order and init. In a
variant's text values, "{seed}" becomes the cell's seed (e.g. a plan file per seed:
"controller.static_plan" = "plans/full-s{seed}.json").
"""

from __future__ import annotations

import copy
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aah.controller.config import POLICIES
from aah.textfile import read_utf8
from aah.training.run_config import RunConfig
from aah.validate import check_int

SWEEP_KEYS = ("name", "regimes", "seeds", "variants")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def cell_name(regime: str, seed: int) -> str:
    """A cell's folder name under OUT/<suite>/."""
    return f"{regime}-s{seed}"


@dataclass(frozen=True)
class Cell:
    """One (regime, seed) run of the grid."""

    regime: str
    seed: int
    config: RunConfig

    @property
    def name(self) -> str:
        return cell_name(self.regime, self.seed)


@dataclass
class SweepConfig:
    name: str
    regimes: list[str]
    seeds: list[int]
    base: RunConfig
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the suite's `[slurm]` table, for a submitit executor (`aah.sweep.cluster` checks it)
    slurm: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_toml(cls, path: str | Path) -> SweepConfig:
        path = Path(path)
        try:
            data = tomllib.loads(read_utf8(path, "sweep config"))
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"sweep config {str(path)!r} is not valid TOML: {err}") from None
        table = data.pop("sweep", None)
        if not isinstance(table, dict):
            raise ValueError(f"{str(path)!r} has no [sweep] table (regimes, seeds): not a suite")
        unknown = sorted(set(table) - set(SWEEP_KEYS))
        if unknown:
            raise ValueError(
                f"[sweep]: unknown key(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(SWEEP_KEYS)}"
            )
        slurm = data.pop("slurm", {})
        if not isinstance(slurm, dict):
            raise ValueError(f"{str(path)!r}: [slurm] must be a table, got {slurm!r}")
        base = RunConfig.from_dict(data, source=str(path))
        sweep = cls(
            name=table.get("name", path.stem),
            regimes=table.get("regimes", []),
            seeds=table.get("seeds", [0, 1, 2]),
            base=base,
            variants=table.get("variants", {}),
            slurm=slurm,
        )
        return sweep.validate()

    def validate(self) -> SweepConfig:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"sweep.name must be a plain file name, got {self.name!r}")
        if not isinstance(self.regimes, list) or not self.regimes:
            raise ValueError(f"sweep.regimes must be a non-empty list, got {self.regimes!r}")
        if len(set(self.regimes)) != len(self.regimes):
            raise ValueError(f"sweep.regimes has duplicates: {self.regimes!r}")
        for regime in self.regimes:
            if not isinstance(regime, str) or not _NAME.match(regime):
                raise ValueError(f"sweep.regimes: bad regime name {regime!r}")
            if regime not in self.variants and regime not in POLICIES:
                raise ValueError(
                    f"sweep.regimes: {regime!r} is neither a policy ({', '.join(POLICIES)}) "
                    "nor defined under [sweep.variants]"
                )
        if not isinstance(self.seeds, list) or not self.seeds:
            raise ValueError(f"sweep.seeds must be a non-empty list of ints, got {self.seeds!r}")
        for seed in self.seeds:
            check_int("sweep.seeds: every seed", seed, 0)
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"sweep.seeds has duplicates: {self.seeds!r}")
        if not isinstance(self.variants, dict):
            raise ValueError(f"sweep.variants must be a table, got {self.variants!r}")
        for name, overrides in self.variants.items():
            if not isinstance(overrides, dict) or not overrides:
                raise ValueError(f"sweep.variants.{name} must be a table of dotted config keys")
        self.cells()  # builds and validates every cell's config now, not hours into the sweep
        return self

    def cells(self) -> list[Cell]:
        """The grid, seed-major: all regimes of one seed run close together in time, so a
        per-seed comparison sees the same machine load."""
        cells = []
        for seed in self.seeds:
            for regime in self.regimes:
                config = copy.deepcopy(self.base)
                if regime in self.variants:
                    for key, value in self.variants[regime].items():
                        if isinstance(value, str):
                            value = value.replace("{seed}", str(seed))
                        config.set(key, value, from_text=False)
                else:
                    config.controller.policy = regime
                config.train.seed = seed
                config.controller.seed = seed
                cells.append(Cell(regime, seed, config.validate()))
        return cells

    def override(self, pairs: list[tuple[str, str]]) -> SweepConfig:
        """Apply `section.key value` overrides to the base of every cell."""
        self.base.override(pairs)
        return self.validate()
