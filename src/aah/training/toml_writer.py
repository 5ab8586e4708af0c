"""A small TOML writer for resolved configs: tables of scalars and (nested) arrays.

None has no TOML form: a None value is written as a comment and read back as the default.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        # JSON string escaping is valid TOML basic-string escaping for these characters.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise ValueError(f"cannot write {value!r} ({type(value).__name__}) as TOML")


def dumps_toml(tables: dict[str, dict[str, Any]]) -> str:
    """`{section: {key: value}}` as TOML text."""
    lines: list[str] = []
    for name, values in tables.items():
        if lines:
            lines.append("")
        lines.append(f"[{name}]")
        for key, value in values.items():
            if value is None:
                lines.append(f"# {key} = (none)")
            else:
                lines.append(f"{key} = {_value(value)}")
    return "\n".join(lines) + "\n"
