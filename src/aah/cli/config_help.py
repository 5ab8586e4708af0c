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
    from aah.training.fields import field_types
    from aah.training.run_config import SECTIONS

    lines = ["config fields (--SECTION.FIELD VALUE, or FIELD = VALUE under [SECTION] in TOML):"]
    for section, cls in SECTIONS.items():
        if section == "controller":
            lines += _controller_lines()
            continue
        types = field_types(cls)
        lines += [_line(f"--{section}.{f.name}", types[f.name], default_text(f))
                  for f in dataclasses.fields(cls)]  # fmt: skip
    return "\n".join(lines) + "\n"


def _line(name: str, tp: Any, default: str) -> str:
    line = f"  {name:<34} {type_name(tp):<18} {default}"
    if typing.get_origin(tp) is typing.Literal:
        line += f"  ({', '.join(typing.get_args(tp))})"
    return line


def _controller_lines() -> list[str]:
    """The fields every policy reads, then every option once, with the policies that read it
    (a family of policies by its first name and a star)."""
    from aah.controller.config import PolicyName
    from aah.controller.options import OPTIONS_OF

    lines = [_line("--controller.policy", PolicyName, "'full'"),
             _line("--controller.warmup_steps", int, "100"),
             _line("--controller.seed", int, "0")]  # fmt: skip
    readers: dict[str, list[str]] = {}
    fields: dict[str, tuple[Any, dataclasses.Field]] = {}
    for cls in dict.fromkeys(OPTIONS_OF.values()):
        users = [name for name, c in OPTIONS_OF.items() if c is cls]
        label = users[0] + ("*" if len(users) > 1 else "")
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            readers.setdefault(f.name, []).append(label)
            fields.setdefault(f.name, (hints[f.name], f))
    for name, (tp, f) in fields.items():
        lines.append(_line(f"--controller.{name}", tp, default_text(f)))
        lines[-1] += f"  [{', '.join(readers[name])}]"
    lines.append("  (NAME*: NAME and the other policies of its family; a policy ignores the "
                 "options it does not read)")  # fmt: skip
    return lines
