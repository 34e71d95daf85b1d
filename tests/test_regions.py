"""Solution regions: finding, blanking, and the errors for malformed markers."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from pytest_hpccourse.authoring.regions import RegionError, Style, blank, find_regions, style_for

PY = textwrap.dedent('''\
    import math


    def norm(xs):
        """Euclidean norm."""
        total = 0.0
        for x in xs:
            ### HINT: accumulate squares
            ### BEGIN SOLUTION
            total += x * x
            ### END SOLUTION
        return math.sqrt(total)


    class Scaler:
        def scale(self, xs, a):
            ### BEGIN SOLUTION
            return [a * x for x in xs]
            ### END SOLUTION
''')

C = textwrap.dedent('''\
    #include <stddef.h>

    void saxpy(size_t n, float a, const float* x, float* y) {
        for (size_t i = 0; i < n; ++i) {
            // HINT: y = a*x + y, in place
            // BEGIN SOLUTION
            y[i] = a * x[i] + y[i];
            // END SOLUTION
        }
    }

    float dot(size_t n, const float* x, const float* y) {
        float acc = 0.0f;
        // BEGIN SOLUTION
        for (size_t i = 0; i < n; ++i) acc += x[i] * y[i];
        // END SOLUTION
        return acc;
    }
''')


def test_find_python_regions_with_hint_and_indent():
    regions = find_regions(PY, "norm.py")
    assert [(r.begin, r.end, r.indent, r.hint, r.hint_start) for r in regions] == [
        (9, 11, " " * 8, "accumulate squares", 8),
        (17, 19, " " * 8, None, None),
    ]


def test_python_blank_raises_with_hint_at_original_indentation():
    out = blank(PY, "norm.py", "demo-07")
    assert "BEGIN SOLUTION" not in out and "END SOLUTION" not in out
    assert "total += x * x" not in out and "a * x for x" not in out
    assert '        ### HINT: accumulate squares\n        raise NotImplementedError("TODO(demo-07): accumulate squares")\n' in out
    assert '        raise NotImplementedError("TODO(demo-07): write this part")\n' in out
    namespace: dict = {}
    exec(compile(out, "norm.py", "exec"), namespace)
    with pytest.raises(NotImplementedError, match=r"^TODO\(demo-07\): accumulate squares$"):
        namespace["norm"]([3.0, 4.0])
    with pytest.raises(NotImplementedError, match=r"TODO\(demo-07\): write this part"):
        namespace["Scaler"]().scale([1.0], 2.0)
    ref: dict = {}
    exec(compile(PY, "norm.py", "exec"), ref)
    assert ref["norm"]([3.0, 4.0]) == 5.0  # the reference itself works


def test_python_blank_keeps_lines_outside_regions_exactly():
    out = blank(PY, "norm.py", "x-01").splitlines()
    src = PY.splitlines()
    assert out[:8] == src[:8]  # up to and including the HINT line
    assert out[9:14] == src[11:16]  # between the regions
    assert len(out) == len(src) - 2 - 2


def test_hint_text_with_quotes_and_unicode_is_a_valid_literal():
    text = '### HINT: 用 "两遍" 扫描 \\ not one\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n'
    out = blank(text, "k.py", "cuda-04")
    with pytest.raises(NotImplementedError) as info:
        exec(compile(out, "k.py", "exec"), {})
    assert str(info.value) == 'TODO(cuda-04): 用 "两遍" 扫描 \\ not one'


def test_c_blank_is_a_comment_and_still_compiles(tmp_path: Path):
    out = blank(C, "saxpy.c", "cuda-01")
    assert "        // HINT: y = a*x + y, in place\n        // TODO(cuda-01): y = a*x + y, in place\n" in out
    assert "    // TODO(cuda-01): write this part\n    return acc;" in out
    assert "BEGIN SOLUTION" not in out and "y[i] = a * x[i]" not in out
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to compile the blank")  # the text assertions above still ran
    for name, text in (("ref.c", C), ("blank.c", out)):
        src = tmp_path / name
        src.write_text(text)
        proc = subprocess.run(["gcc", "-fsyntax-only", "-Wall", str(src)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", ["k.cu", "k.cuh", "k.cpp", "k.hpp", "k.mlir", "k.td", "k.h", "k.cc"])
def test_c_like_suffixes(name):
    assert style_for(name) is Style.SLASH
    text = "a\n  // BEGIN SOLUTION\n  b\n  // END SOLUTION\nc\n"
    assert blank(text, name, "m-01") == "a\n  // TODO(m-01): write this part\nc\n"


def test_hash_style_files_get_a_hash_comment():
    assert style_for("cfg.toml") is Style.HASH and style_for("CMakeLists.txt") is Style.HASH
    text = "[a]\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION\ny = 2\n"
    assert blank(text, "cfg.toml", "mlir-02") == "[a]\n# TODO(mlir-02): write this part\ny = 2\n"


def test_crlf_line_endings_are_preserved():
    text = "def f():\r\n    ### BEGIN SOLUTION\r\n    return 1\r\n    ### END SOLUTION\r\n\r\nX = 2\r\n"
    out = blank(text, "f.py", "a-01")
    assert out == 'def f():\r\n    raise NotImplementedError("TODO(a-01): write this part")\r\n\r\nX = 2\r\n'


def test_no_region_returns_text_unchanged():
    text = "x = 1\n# a comment\n"
    assert find_regions(text, "a.py") == [] and blank(text, "a.py", "a-01") is text


def test_markers_in_string_literals_are_code_not_markers():
    text = 'MSG = "put your code between BEGIN SOLUTION and END SOLUTION"\n'
    assert find_regions(text, "a.py") == []


def test_an_ordinary_hint_comment_is_just_a_comment():
    text = "# Hint: this is prose\nx = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION\n"
    assert blank(text, "a.py", "a-01").startswith("# Hint: this is prose\nx = 1\nraise ")


@pytest.mark.parametrize("text, line, message", [
    ("### BEGIN SOLUTION\nx\n### BEGIN SOLUTION\ny\n### END SOLUTION\n### END SOLUTION\n", 3, "nested"),
    ("a\n### BEGIN SOLUTION\nx\n", 2, "never closed"),
    ("a\nb\n### END SOLUTION\n", 3, "without a BEGIN"),
    ("a\n## BEGIN SOLUTION\nx\n### END SOLUTION\n", 2, "malformed solution marker"),
    ("a\n# END SOLUTION\n", 2, "malformed solution marker"),
    ("### BEGIN SOLUTION  # the loop\nx\n### END SOLUTION\n", 1, "malformed solution marker"),
    ("### BEGIN SOLUTION\n  # end solution here\n### END SOLUTION\n", 2, "malformed solution marker"),
    ("x = 1\n### HINT: do it\n\n### BEGIN SOLUTION\ny\n### END SOLUTION\n", 2, "directly before"),
    ("### HINT: dangling\n", 1, "directly before"),
])
def test_python_marker_errors_name_file_and_line(text, line, message):
    with pytest.raises(RegionError) as info:
        find_regions(text, "lesson/kernel.py")
    err = info.value
    assert (err.file, err.line) == ("lesson/kernel.py", line)
    assert message in err.msg
    assert str(err).startswith(f"lesson/kernel.py:{line}: ")


def test_python_markers_in_a_c_file_are_an_error():
    with pytest.raises(RegionError) as info:
        find_regions("int x;\n### BEGIN SOLUTION\nx = 1;\n### END SOLUTION\n", "k.cu")
    assert info.value.line == 2 and "// BEGIN SOLUTION" in info.value.msg


def test_c_markers_in_a_python_file_are_an_error():
    with pytest.raises(RegionError) as info:
        find_regions("x = 1\n// BEGIN SOLUTION\n", "k.py")
    assert info.value.line == 2


def test_markers_in_a_file_type_without_a_style_are_an_error():
    with pytest.raises(RegionError) as info:
        find_regions("text\n-- BEGIN SOLUTION\n", "query.sql")
    assert info.value.line == 2 and "without a marker style" in info.value.msg
    assert style_for("notes.md") is None and find_regions("no markers", "notes.md") == []


def test_blank_raises_on_unbalanced_markers():
    with pytest.raises(RegionError):
        blank("// BEGIN SOLUTION\n", "k.cu", "c-01")
