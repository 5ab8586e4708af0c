"""The `aah train --help` list of config fields, generated from the config dataclasses, so it
can never drift from what `--SECTION.FIELD` accepts. Built only when help is asked for: the
dataclasses' packages import torch."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any


def type_name(tp: Any) -> str:
    """`int`, `float | None`, `list[int]`: a field type as written in the dataclass; a choice
    (a `Literal`) is `choice`, its names listed after the default."""
    if typing.get_origin(tp) is typing.Literal:
        return "choice"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "")


def default_text(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    if isinstance(value, bool):
        return str(value).lower()  # as TOML and the command line spell it
    return "none" if value is None else repr(value) if isinstance(value, str) else str(value)


def fields_text() -> str:
    """One line per field of every section: --section.field, type, default."""
    from aah.train.fields import field_types
    from aah.train.run_config import SECTIONS

    lines = ["config fields (--SECTION.FIELD VALUE, or FIELD = VALUE under [SECTION] in TOML):"]
    for section, cls in SECTIONS.items():
        types = field_types(cls)
        for field in dataclasses.fields(cls):
            name, tp = f"--{section}.{field.name}", types[field.name]
            line = f"  {name:<34} {type_name(tp):<18} {default_text(field)}"
            if typing.get_origin(tp) is typing.Literal:
                line += f"  ({', '.join(typing.get_args(tp))})"
            lines.append(line)
    return "\n".join(lines) + "\n"
