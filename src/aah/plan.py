"""Window plans: one type and one file format for the GPT, the caches, the HF side and the CLI.

A plan gives every attention (query) head of every layer a causal window w >= 1 (w >= T: the
whole context) and s >= 0 attention sinks (keys 0..s-1, seen whatever the window).
`windows[layer][head]` and `sinks[layer][head]`.

The file is one JSON object, what `WindowPlan.to_json` writes:

    {"windows": [[...], ...], "sinks": [[...], ...], "seq_len": 4096, ...}

A healed plan (`aah.hf.heal`) also carries learned parameters (`params`, name -> tensor): `save`
writes them to a safetensors file beside the plan and records its name and SHA-256 under the
"heal" key; `load` reads them back and refuses a file whose hash differs.

"windows" is required. "sinks" is optional: absent or null means none, one int means that
many for every head. "seq_len" (optional) is the context the plan was made for: a window is a
share of it (`at_length`). Every other key (a search's budget, coverage, signal, method...) is
kept in `info` as it was and written back. A bare [[...]] list, the oldest format, reads as
windows without sinks.

A leaf module: it imports nothing from the model, the controller or the integrations, so all of
them can use it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aah.atomic import write_bytes_atomic, write_text_atomic
from aah.textfile import read_json
from aah.validate import is_int

Plan = list[list[int]]

#: keys of the file format that `WindowPlan` reads itself; the rest go to `info`
OWN_KEYS = ("windows", "sinks", "seq_len")
#: what a plan file may be at most: far above any model's (a few [layer][head] tables and a
#: few keys), far below what would hang or crash the reader
MAX_FILE_BYTES = 64 * 2**20
MAX_DEPTH = 8
#: the info key a healed plan records its parameters' file under, and that file's suffix
HEAL_KEY = "heal"
PARAMS_SUFFIX = ".heal.safetensors"


def check_plan(plan: object, n_layer: int | None = None, n_head: int | None = None) -> Plan:
    """`plan` as lists of ints >= 1; ValueError if it is not one or its shape differs."""
    return _check_rows(plan, "plan", "window", 1, n_layer, n_head)


def check_sinks(sinks: object, n_layer: int | None = None, n_head: int | None = None) -> Plan:
    """`sinks` as lists of ints >= 0 ([layer][head]); ValueError naming the bad value."""
    return _check_rows(sinks, "sinks", "sink", 0, n_layer, n_head)


def _check_rows(
    rows: object, name: str, item: str, minimum: int, n_layer: int | None, n_head: int | None
) -> Plan:
    if (
        isinstance(rows, (str, bytes))
        or not isinstance(rows, Sequence)
        or not all(isinstance(row, Sequence) and not isinstance(row, (str, bytes)) for row in rows)
    ):
        raise ValueError(f"{name} must be a list of per-layer lists, got {rows!r:.80}")
    out: Plan = []
    for layer, row in enumerate(rows):
        for x in row:
            if not is_int(x) or x < minimum:
                raise ValueError(f"{name} layer {layer}: every {item} must be an int >= "
                                 f"{minimum}, got {x!r}")  # fmt: skip
        out.append([int(x) for x in row])
    if n_layer is not None and len(out) != n_layer:
        raise ValueError(f"{name} has {len(out)} layers, the model has {n_layer}")
    if n_head is not None:
        for layer, row in enumerate(out):
            if len(row) != n_head:
                raise ValueError(f"{name} layer {layer} has {len(row)} heads, the model has "
                                 f"{n_head}")  # fmt: skip
    return out


def full_plan(n_layer: int, n_head: int, seq_len: int) -> Plan:
    """Every head sees its whole causal context."""
    return [[seq_len] * n_head for _ in range(n_layer)]


@dataclass(frozen=True)
class WindowPlan:
    """Windows and sinks per head, the context they were made for, and the file's other keys.

    Build one with `WindowPlan.of(windows, sinks=4)` (an int or [layer][head] sinks); read and
    write files with `load` / `save`. `hf.apply(model, plan)` and `GPT.set_window_plan` take
    its `windows` and `sinks`."""

    windows: Plan
    sinks: Plan
    seq_len: int | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    # Learned parameters of a healed plan, name -> torch tensor (empty for every other plan).
    params: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        windows = check_plan(self.windows)
        shape = [len(row) for row in windows]
        sinks = check_sinks(self.sinks)
        if [len(row) for row in sinks] != shape:
            raise ValueError(
                f"sinks must be shaped like the windows {shape}, got {self.sinks!r:.80}"
            )
        if self.seq_len is not None and (not is_int(self.seq_len) or self.seq_len < 1):
            raise ValueError(f"seq_len must be an int >= 1 or None, got {self.seq_len!r}")
        clash = sorted(set(self.info) & set(OWN_KEYS))
        if clash:
            raise ValueError(f"info may not hold the plan's own keys {', '.join(clash)}")
        object.__setattr__(self, "windows", windows)
        object.__setattr__(self, "sinks", sinks)
        object.__setattr__(self, "info", dict(self.info))
        object.__setattr__(self, "params", dict(self.params))

    @classmethod
    def of(
        cls, windows: object, sinks: object = 0, seq_len: int | None = None, **info: Any
    ) -> WindowPlan:
        """A plan from windows and sinks given as one int for every head, [layer][head] ints,
        or None (none)."""
        rows = check_plan(windows)
        return cls(rows, _sink_rows(sinks, rows), seq_len, info)

    @property
    def has_sinks(self) -> bool:
        return any(any(row) for row in self.sinks)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"windows": self.windows, "sinks": self.sinks}
        if self.seq_len is not None:
            out["seq_len"] = self.seq_len
        return {**out, **self.info}

    def to_json(self) -> str:
        """The file format, one JSON object (floats in Python's shortest round-trip repr)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_data(cls, data: object) -> WindowPlan:
        """A plan from a parsed file: the object format or a bare [[...]] list."""
        if not isinstance(data, dict):
            return cls.of(data)
        if "windows" not in data:
            raise ValueError("a plan file needs a 'windows' key")
        rest = {k: v for k, v in data.items() if k not in OWN_KEYS}
        return cls.of(data["windows"], data.get("sinks"), data.get("seq_len"), **rest)

    @classmethod
    def load(cls, path: str | Path) -> WindowPlan:
        """Read a plan file; ValueError naming the file and what is wrong with it."""
        data = read_json(str(path), "plan file", max_bytes=MAX_FILE_BYTES, max_depth=MAX_DEPTH)
        try:
            plan = cls.from_data(data)
        except ValueError as err:
            raise ValueError(f"plan file {path}: {err}") from None
        heal = plan.info.get(HEAL_KEY)
        if not isinstance(heal, Mapping) or "file" not in heal:
            return plan
        return replace(plan, params=_read_params(Path(path), heal))

    def save(self, path: str | Path) -> None:
        """Write the file atomically (no half-written plan on an interrupted write); a healed
        plan's parameters first, to `<name>.heal.safetensors` beside it."""
        path = Path(path)
        if not self.params:
            write_text_atomic(path, self.to_json() + "\n")
            return
        from safetensors.torch import save as tensors_to_bytes

        blob = tensors_to_bytes({k: v.detach().contiguous().cpu() for k, v in self.params.items()})
        side = params_file(path)
        write_bytes_atomic(side, blob)
        heal = {**self.info.get(HEAL_KEY, {}), "file": side.name, "sha256": _sha256(blob)}
        write_text_atomic(path, replace(self, info={**self.info, HEAL_KEY: heal}).to_json() + "\n")

    def at_length(self, seq_len: int, full: int | None = None) -> WindowPlan:
        """The plan for context `seq_len`: windows scaled by seq_len / the plan's own seq_len,
        and a head that saw its whole context gets `full` (default `seq_len`), so the plan keeps
        its share of every head's context; a plan that records no seq_len is returned as is."""
        if self.seq_len is None:
            return self
        whole = seq_len if full is None else full
        scale = seq_len / self.seq_len
        windows = [
            [whole if w >= self.seq_len else max(1, round(w * scale)) for w in row]
            for row in self.windows
        ]
        return WindowPlan(windows, self.sinks, seq_len, self.info, self.params)


def params_file(path: str | Path) -> Path:
    """Where `WindowPlan.save` writes a healed plan's parameters: beside the plan file, named
    after it (`healed.json` -> `healed.heal.safetensors`)."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(".json") + PARAMS_SUFFIX)


def _sha256(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def _read_params(path: Path, heal: Mapping[str, Any]) -> dict[str, Any]:
    """The tensors of the file `heal["file"]` beside the plan file `path`, after checking its
    SHA-256 against `heal["sha256"]`."""
    name = str(heal["file"])
    side = path.with_name(name)
    if Path(name).name != name:
        raise ValueError(f"plan file {path}: its heal file {name!r} must lie beside it")
    try:
        blob = side.read_bytes()
    except OSError as err:
        raise ValueError(
            f"plan file {path}: cannot read its healed parameters {side}: {err}"
        ) from None
    if _sha256(blob) != heal.get("sha256"):
        raise ValueError(
            f"plan file {path}: {side} does not match the SHA-256 the plan records "
            "(changed or from another plan); heal the plan again"
        )
    from safetensors.torch import load as tensors_from_bytes

    try:
        return dict(tensors_from_bytes(blob))
    except Exception as err:  # safetensors raises its own error types
        raise ValueError(f"plan file {path}: {side} is not a safetensors file: {err}") from None


def _sink_rows(sinks: object, windows: Plan) -> Plan:
    if sinks is None:
        sinks = 0
    if is_int(sinks):
        if sinks < 0:  # type: ignore[operator]
            raise ValueError(f"sinks must be >= 0, got {sinks}")
        return [[int(sinks)] * len(row) for row in windows]  # type: ignore[arg-type]
    return check_sinks(sinks)
