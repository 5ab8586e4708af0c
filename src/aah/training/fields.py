"""Typed field values for dataclass configs: from TOML values or from command-line strings.

Supported field types: int, float, bool, str, a `Literal` of strings (a choice: the names are
read from the type), `X | None`, list/tuple of those, nested lists. Errors are ValueErrors
that name the dotted key; a float must be finite.
"""

from __future__ import annotations

import contextlib
import json
import math
import types
import typing
from dataclasses import fields, is_dataclass
from typing import Any

from aah.validate import check_choice

NONE_WORDS = ("none", "null")
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def field_types(cls: type) -> dict[str, Any]:
    """Field name -> resolved type annotation of a dataclass."""
    if not is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls) if f.init}


def _is_optional(tp: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            inner = args[0] if len(args) == 1 else typing.Union[tuple(args)]  # noqa: UP007
            return True, inner
    return False, tp


def coerce(value: Any, tp: Any, key: str, *, from_text: bool = False) -> Any:
    """Convert `value` (a TOML value, or text when `from_text`) to field type `tp`."""
    optional, inner = _is_optional(tp)
    if optional:
        if value is None or (from_text and str(value).strip().lower() in NONE_WORDS):
            return None
        return coerce(value, inner, key, from_text=from_text)
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        check_choice(key, value, tp)
        return value
    if origin in (list, tuple) or tp in (list, tuple):
        return _coerce_sequence(value, tp, key, from_text)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return coerce(value, option, key, from_text=from_text)
            except ValueError:
                continue
        raise ValueError(f"{key}: {value!r} is not a valid {tp}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if from_text and str(value).strip().lower() in TRUE_WORDS + FALSE_WORDS:
            return str(value).strip().lower() in TRUE_WORDS
        raise ValueError(f"{key} expects true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if from_text:
            try:
                return int(str(value).strip().replace("_", ""))
            except ValueError:
                pass
        raise ValueError(f"{key} expects an integer, got {value!r}")
    if tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif from_text:
            with contextlib.suppress(ValueError):
                number = float(str(value).strip())
        if number is None:
            raise ValueError(f"{key} expects a number, got {value!r}")
        # inf/nan parse as floats (also in TOML) but no setting means them.
        if not math.isfinite(number):
            raise ValueError(f"{key} must be a finite number, got {value!r}")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"{key} expects a string, got {value!r}")
    raise ValueError(f"{key}: unsupported field type {tp!r}")


def _coerce_sequence(value: Any, tp: Any, key: str, from_text: bool) -> Any:
    args = typing.get_args(tp)
    container = typing.get_origin(tp) or tp
    item_tp = args[0] if args else Any
    if from_text and isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"{key}: cannot parse {text!r} as a list ({err.msg})") from None
            from_text = False
        else:
            value = [part for part in text.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{key} expects a list, got {value!r}")
    items = [coerce(v, item_tp, f"{key}[{i}]", from_text=from_text) for i, v in enumerate(value)]
    return tuple(items) if container is tuple else items
