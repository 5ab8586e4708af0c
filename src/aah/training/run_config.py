"""`RunConfig`: the four config sections of a run, mapped 1:1 onto TOML and CLI overrides.

TOML: sections `[model]`, `[train]`, `[data]`, `[controller]`, keys = dataclass fields (a
`[sweep]` table, the grid of a suite file, is left to `aah sweep`).
Overrides: `section.key=value` strings parsed by the field's type. Unknown sections, unknown
keys and bad values raise ValueError naming them.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aah.controller import ControllerConfig
from aah.controller.config import PolicyName
from aah.controller.options import option_types
from aah.data import DataConfig
from aah.model.config import GPTConfig
from aah.training.config import TrainConfig
from aah.training.fields import coerce, field_types
from aah.training.toml_writer import dumps_toml


def controller_types() -> dict[str, Any]:
    """[controller] key -> type: the fields every policy reads, then every policy's options."""
    return {"policy": PolicyName, "warmup_steps": int, "seed": int} | option_types()


SECTIONS: dict[str, type] = {
    "model": GPTConfig,
    "train": TrainConfig,
    "data": DataConfig,
    "controller": ControllerConfig,
}


@dataclass
class RunConfig:
    model: GPTConfig = field(default_factory=GPTConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)

    @property
    def seq_len(self) -> int:
        return self.model.max_seq_len

    def validate(self) -> RunConfig:
        """Validate every section (ValueError names the field)."""
        self._check_finite()
        self.model.validate()
        self.train.validate()
        self.data.validate()
        self.controller.validate(self.seq_len)
        return self

    def _check_finite(self) -> None:
        """Every float of every section is finite: a section's range checks may let inf or
        nan through (a comparison with nan is always False)."""
        for dotted, value in self.flat().items():
            items = value if isinstance(value, (list, tuple)) else [value]
            for item in items:
                if isinstance(item, float) and not math.isfinite(item):
                    raise ValueError(f"{dotted} must be a finite number, got {value!r}")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        out = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS if
               name != "controller"}  # fmt: skip
        return out | {"controller": self.controller.to_dict()}

    def flat(self) -> dict[str, Any]:
        """{"section.key": value} over every field (the CLI override names)."""
        return {f"{s}.{k}": v for s, values in self.to_dict().items() for k, v in values.items()}

    def to_toml(self) -> str:
        return dumps_toml(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> RunConfig:
        """Build from `{section: {key: value}}`; unknown names and bad types raise ValueError."""
        config = cls()
        unknown = [name for name in data if name not in SECTIONS]
        if unknown:
            raise ValueError(
                f"{source}: unknown section(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(SECTIONS)}"
            )
        for name, values in data.items():
            if not isinstance(values, dict):
                raise ValueError(f"{source}: {name!r} must be a [{name}] table")
            for key, value in values.items():
                config.set(f"{name}.{key}", value, from_text=False)
        return config

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        path = Path(path)
        try:
            with path.open("rb") as handle:
                data = tomllib.load(handle)
        except FileNotFoundError:
            raise ValueError(f"config file {str(path)!r} does not exist") from None
        except IsADirectoryError:
            raise ValueError(f"config file {str(path)!r} is a directory, not a TOML file") from None
        except UnicodeDecodeError as err:
            raise ValueError(
                f"config file {str(path)!r} is not UTF-8 text (byte {err.start}): not a TOML file"
            ) from None
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"config file {str(path)!r} is not valid TOML: {err}") from None
        except OSError as err:
            raise ValueError(f"config file {str(path)!r} cannot be read: {err.strerror}") from None
        data.pop("sweep", None)  # a suite file's grid, read only by `aah sweep`
        data.pop("slurm", None)  # and its sbatch settings (`aah sweep --executor slurm`)
        return cls.from_dict(data, source=str(path))

    def set(self, dotted: str, value: Any, *, from_text: bool = True) -> None:
        """Set `section.key` to `value`, parsed by the field's type."""
        section, _, key = dotted.partition(".")
        if section not in SECTIONS or not key:
            raise ValueError(
                f"unknown config key {dotted!r}: use section.key with section one of "
                f"{', '.join(SECTIONS)}"
            )
        types = controller_types() if section == "controller" else field_types(SECTIONS[section])
        if key not in types:
            raise ValueError(f"unknown config key {dotted!r}; [{section}] keys: {', '.join(types)}")
        typed = coerce(value, types[key], dotted, from_text=from_text)
        if section == "controller":
            self.controller.set(key, typed)  # routed to the policy's options
        else:
            setattr(getattr(self, section), key, typed)

    def override(self, pairs: list[tuple[str, str]]) -> RunConfig:
        for dotted, text in pairs:
            self.set(dotted, text, from_text=True)
        return self
