"""A small TOML writer for the subset the course uses (no runtime dependency on tomli-w).

Supported values: str, bool, int, float (incl. inf/nan), lists of values, dicts (tables), lists of
dicts (arrays of tables at table level, inline tables inside arrays). `tomllib.loads(dumps(d)) == d`
holds for every such document; anything else (dates, None, ...) raises TypeError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def dumps(doc: Mapping[str, Any]) -> str:
    out: list[str] = []
    _table(out, (), doc, header=False)
    return "\n".join(out).lstrip("\n") + "\n"


def key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else _basic_string(k)


def _escape_char(c: str, multiline: bool) -> str:
    if multiline and c == "\n":
        return c
    if c in _ESCAPES:
        return _ESCAPES[c]
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\u{ord(c):04X}"
    return c


def _basic_string(s: str) -> str:
    return '"' + "".join(_escape_char(c, False) for c in s) + '"'


def string(s: str) -> str:
    """A TOML string literal; multi-line strings keep their line breaks for readability."""
    if "\n" not in s:
        return _basic_string(s)
    return '"""\n' + "".join(_escape_char(c, True) for c in s) + '"""'


def _is_table(v: Any) -> bool:
    return isinstance(v, Mapping)


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, Mapping) for x in v)


def value(v: Any) -> str:
    """An inline TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, Sequence):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML: {v!r}")


def _table(out: list[str], path: tuple[str, ...], table: Mapping[str, Any], header: bool) -> None:
    plain = [(k, v) for k, v in table.items() if not _is_table(v) and not _is_table_array(v)]
    subtables = [(k, v) for k, v in table.items() if _is_table(v)]
    arrays = [(k, v) for k, v in table.items() if _is_table_array(v)]
    if header and (plain or not (subtables or arrays)):
        out.append("")
        out.append("[" + ".".join(key(p) for p in path) + "]")
    for k, v in plain:
        out.append(f"{key(k)} = {value(v)}")
    for k, v in subtables:
        _table(out, (*path, k), v, header=True)
    for k, items in arrays:
        for item in items:
            out.append("")
            out.append("[[" + ".".join(key(p) for p in (*path, k)) + "]]")
            _aot_item(out, (*path, k), item)


def _aot_item(out: list[str], path: tuple[str, ...], item: Mapping[str, Any]) -> None:
    # The [[header]] is already written: plain values first, then nested tables under it.
    plain = {k: v for k, v in item.items() if not _is_table(v) and not _is_table_array(v)}
    nested = {k: v for k, v in item.items() if k not in plain}
    for k, v in plain.items():
        out.append(f"{key(k)} = {value(v)}")
    _table(out, path, nested, header=False)
