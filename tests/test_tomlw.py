"""The small TOML writer: everything it writes reads back identically with tomllib."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from pytest_hpccourse import tomlw

FIXTURES = Path(__file__).parent / "fixtures" / "release"

DOCS = [
    {},
    {"id": "cuda-04", "n": 3, "x": 2.5, "tiny": 1e-5, "big": 1e300, "neg": -0.0, "flag": True, "off": False},
    {"s": 'quote " backslash \\ tab \t bell \x07 del \x7f unicode 规约 😀'},
    {"multi": 'line one\nline "two" \\ \n\tthree\n', "trailing_quote": 'ends with "\n"', "cr": "a\r\nb"},
    {"list": [1, 2, 3], "nested": [[1, 2], ["a", "b"]], "empty": [], "mixed": [{"a": 1}, {"b": [2]}]},
    {"table": {"a": 1, "sub": {"b": "c"}}, "only_sub": {"deeper": {"x": 1}}, "empty_table": {}},
    {"weird key": 1, "dotted.key": 2, "": 3, "ключ": 4, "a-b_c9": 5},
    {"mutants": [{"file": "a.py", "find": "x\n  y", "replace": "", "count": 1},
                 {"file": "b.py", "find": "z", "replace": "w", "count": 2}],
     "questions": [{"id": "Q1", "options": ["A. x", "B. y"], "extra": {"k": "v"}},
                   {"id": "Q2", "groups": [["reduce-scatter", "规约散射"], ["all-gather"]]}]},
    {"cuda-04": {"Q1": {"answer": 2.0, "explanation": "..."},
                 "Q3": {"groups": [["a", "b"], ["c"]], "explanation": "多行\n说明"}}},
]


@pytest.mark.parametrize("doc", DOCS)
def test_round_trip(doc):
    text = tomlw.dumps(doc)
    assert tomllib.loads(text) == doc


def test_special_floats():
    back = tomllib.loads(tomlw.dumps({"a": math.inf, "b": -math.inf, "c": math.nan}))
    assert back["a"] == math.inf and back["b"] == -math.inf and math.isnan(back["c"])


def test_keys_file_shape_matches_the_plugin_contract():
    text = tomlw.dumps({"cuda-04": {"Q1": {"answer": 2.0}}})
    assert "[cuda-04.Q1]" in text and "answer = 2.0" in text


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("lesson.toml")), ids=lambda p: p.parent.name)
def test_fixture_lessons_round_trip(path: Path):
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    assert tomllib.loads(tomlw.dumps(data)) == data


@pytest.mark.parametrize("bad", [{"x": None}, {"x": object()}, {"x": [1, None]}])
def test_unsupported_values_raise(bad):
    with pytest.raises(TypeError):
        tomlw.dumps(bad)
