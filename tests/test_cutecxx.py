"""pytest_hpccourse.runtimes.cute.cutecxx: build, cache and run lesson C++ programs (host g++ path; the GPU path's detection)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_hpccourse.runtimes.cute import cutecxx

pytestmark = pytest.mark.skipif(not cutecxx.host_available(), reason="needs g++ and the CuTe + CUDA headers")

LAYOUT_PROGRAM = r"""
#include <cute/layout.hpp>
#include <cstdio>
#include "shape.hpp"
using namespace cute;
int main(int argc, char** argv) {
  auto layout = make_layout(make_shape(Int<ROWS>{}, Int<COLS>{}), LayoutRight{});
  std::printf("%d %d %d\n", int(size(layout)), int(layout(1, 2)), argc - 1);
  return 0;
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private build cache; no precompiled header (it takes ~15 s to build and these programs are small)."""
    monkeypatch.setenv("HPCCOURSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HPCCOURSE_CUTECXX_PCH", "0")
    return tmp_path


def _lesson(root: Path, main: str, text: str, **others: str) -> Path:
    folder = root / "lesson"
    folder.mkdir(exist_ok=True)
    for name, body in others.items():
        (folder / name.replace("_", ".")).write_text(body)
    path = folder / main
    path.write_text(text)
    return path


def test_runs_a_cute_program_and_caches_the_build_by_content(cache):
    main = _lesson(cache, "driver.cpp", LAYOUT_PROGRAM, shape_hpp="#define COLS 5\n")
    before = cutecxx.STATS.compiles
    assert cutecxx.run(main, "x", "y", defines={"ROWS": 3}) == "15 7 2\n"  # (1, 2) of (3,5):(5,1) is 7
    exe = cutecxx.build(main, defines={"ROWS": 3})
    assert cutecxx.STATS.compiles == before + 1 and exe.is_file()
    assert str(exe).startswith(str(cache / "cache"))
    (main.parent / "shape.hpp").write_text("#define COLS 6\n")  # a header beside the driver is part of the key
    assert cutecxx.run(main, defines={"ROWS": 3}) == "18 8 0\n"
    assert cutecxx.STATS.compiles == before + 2


def test_compile_errors_quote_the_first_errors_and_keep_the_log(cache):
    bad = "#include \"learner.hpp\"\nint main() { return f(); }\n"
    main = _lesson(cache, "driver.cpp", bad, learner_hpp="int f() { return undefined_name + 1; }\n")
    with pytest.raises(cutecxx.CuteCompileError) as e:
        cutecxx.build(main)
    err = e.value
    assert "learner.hpp:1" in err.diagnostics and "undefined_name" in err.diagnostics
    assert str(cache) not in err.diagnostics  # paths inside the lesson are shown relative to it
    assert err.log is not None and "undefined_name" in err.log.read_text()
    with pytest.raises(cutecxx.CuteCompileError) as again:  # remembered: not compiled twice in one process
        cutecxx.build(main)
    assert again.value is err


@pytest.mark.parametrize(
    ("body", "kind", "needle"),
    [
        ("std::puts(\"partial\"); return 3;", cutecxx.CuteRunError, "exited with status 3"),
        ("volatile int* p = nullptr; return *p;", cutecxx.CuteRunError, "SIGSEGV"),
        ("for (;;) {}", cutecxx.CuteTimeoutError, "ran past"),
    ],
)
def test_failing_programs_raise_with_what_happened(cache, body, kind, needle):
    main = _lesson(cache, "prog.cpp", "#include <cstdio>\nint main() { " + body + " }\n")
    with pytest.raises(kind) as e:
        cutecxx.run(main, timeout=2)
    assert needle in str(e.value)
    if kind is cutecxx.CuteRunError and "status" in needle:
        assert e.value.returncode == 3 and "partial" in e.value.stdout


def test_gpu_path_is_detected_and_refused_cleanly(cache, monkeypatch):
    monkeypatch.setenv("HPCCOURSE_CUTE_GPU", "0")
    assert cutecxx.gpu_available() is False
    main = _lesson(cache, "k.cu", "int main() { return 0; }\n")
    monkeypatch.setattr(cutecxx, "nvcc", lambda: None)
    with pytest.raises(cutecxx.CuteUnavailableError, match="nvcc"):
        cutecxx.build(main, gpu=True)


def test_missing_headers_make_the_host_path_unavailable(cache, monkeypatch):
    monkeypatch.setattr(cutecxx.cute, "compile_flags", lambda: [])
    assert cutecxx.host_available() is False
    main = _lesson(cache, "prog.cpp", "int main() { return 0; }\n")
    with pytest.raises(cutecxx.CuteUnavailableError, match="cute-cxx needs"):
        cutecxx.build(main)


@pytest.mark.skipif(os.environ.get("HPCCOURSE_CUTECXX_PCH") == "0", reason="precompiled header disabled")
def test_precompiled_header_is_built_once_and_used(tmp_path, monkeypatch):
    """Slow (~15 s, once per machine and flags): the PCH must be valid for the host flags, or builds silently
    parse CuTe again (e.g. -pthread defines _REENTRANT, which a PCH built without it rejects)."""
    import subprocess

    flags = [*cutecxx.cute.compile_flags(), *cutecxx.HOST_FLAGS]
    folder = cutecxx._pch_dir(flags)
    assert folder is not None and (folder / "cutecxx_pch.hpp.gch").is_file()
    src = tmp_path / "use.cpp"
    src.write_text("#include <cute/tensor.hpp>\nint main() { return 0; }\n")
    out = subprocess.run([cutecxx.compiler(), *flags, "-Winvalid-pch", "-include", str(folder / "cutecxx_pch.hpp"),
                          str(src), "-o", str(tmp_path / "use")], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and "not used" not in out.stderr, out.stderr[-2000:]
