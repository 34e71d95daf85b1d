"""The three CuTe capabilities of module 04 (`cute`, `cute-cxx`, `cute-dsl`) and the include-dir lookup."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_hpccourse.grading import capabilities
from pytest_hpccourse.runtimes.cute import oracles

HOST_PROGRAM = r"""
#include <cute/layout.hpp>
#include <cstdio>
using namespace cute;
int main() {
  auto dyn = make_layout(make_shape(4, 8), make_stride(8, 1));
  auto cm  = make_layout(make_shape(Int<3>{}, Int<5>{}));                  // column-major (_3,_5):(_1,_3)
  auto gap = make_layout(make_shape(2, make_shape(3, 2)), make_stride(7, make_stride(1, 30)));
  std::printf("%d %d\n", int(size(dyn)), int(cosize(dyn)));
  std::printf("%d %d\n", int(decltype(size(cm))::value), int(decltype(cosize(cm))::value));
  std::printf("%d %d %d\n", int(size(gap)), int(cosize(gap)), int(gap(1, make_coord(2, 1))));
  return 0;
}
"""


def test_cute_is_pycute(monkeypatch):
    has_pycute = capabilities._has_module("pycute")
    assert capabilities.available("cute") is has_pycute
    if has_pycute:  # scripts/setup installs it; the value must come from pycute itself
        import pycute

        layout = pycute.Layout((4, 8), (8, 1))
        assert (layout.size(), layout.cosize(), layout(1, 2)) == (32, 32, 10)
    capabilities.available.cache_clear()
    monkeypatch.setenv("HPCCOURSE_CAPS_OFF", "cute")
    assert not capabilities.available("cute")


def test_the_three_parts_are_separate_capabilities(monkeypatch):
    assert {"cute", "cute-cxx", "cute-dsl"} <= capabilities.known()
    monkeypatch.setenv("HPCCOURSE_CAPS_OFF", "cute-cxx,cute-dsl")
    assert capabilities.missing(["cute-cxx", "cute-dsl"]) == ["cute-cxx", "cute-dsl"]
    assert capabilities.available("cute") is capabilities._has_module("pycute")


def test_without_the_wheel_nothing_is_found(monkeypatch):
    real = oracles._spec_dirs
    monkeypatch.setattr(oracles, "_spec_dirs", lambda name: [] if name == "cutlass_library" else real(name))
    oracles.include_dirs.cache_clear()
    try:
        assert oracles.include_dirs() == ()
        assert capabilities.cute_include_dirs() == ()
        assert not capabilities._cute_cxx()
        assert oracles.compile_flags() == []
        assert any("nvidia-cutlass==4.2.0.0" in m for m in oracles.missing_parts())
    finally:
        oracles.include_dirs.cache_clear()


def test_cuda_headers_need_all_three_parts(tmp_path):
    (tmp_path / "crt").mkdir()
    (tmp_path / "cuda_runtime_api.h").write_text("")
    (tmp_path / "crt" / "host_defines.h").write_text("")
    assert oracles._complete([tmp_path, tmp_path / "cccl"]) is None  # no libcu++
    (tmp_path / "cccl" / "cuda" / "std").mkdir(parents=True)
    (tmp_path / "cccl" / "cuda" / "std" / "utility").write_text("")
    assert oracles._complete([tmp_path, tmp_path / "cccl", tmp_path / "absent"]) == [tmp_path, tmp_path / "cccl"]


def test_cuda_home_is_searched_first(tmp_path, monkeypatch):
    inc = tmp_path / "include"
    for h in ("cuda_runtime_api.h", "crt/host_defines.h", "cccl/cuda/std/utility"):
        (inc / h).parent.mkdir(parents=True, exist_ok=True)
        (inc / h).write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert oracles.cuda_include_dirs() == [inc, inc / "cccl"]


@pytest.mark.skipif(not capabilities.available("cute-cxx"), reason="cute-cxx is not installed")
def test_include_dirs_hold_cute_first():
    dirs = capabilities.cute_include_dirs()
    assert (Path(dirs[0]) / "cute" / "layout.hpp").is_file()
    assert (Path(dirs[0]) / "cutlass" / "cutlass.h").is_file()
    assert oracles.compile_flags() == ["-std=c++17", *(f"-I{d}" for d in dirs)]


@pytest.mark.timeout(120)
def test_a_host_cute_program_compiles_and_runs(tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("g++ is missing")
    assert capabilities.available("cute-cxx"), "CuTe headers not found: " + "; ".join(oracles.missing_parts())
    src = tmp_path / "layout.cpp"
    src.write_text(HOST_PROGRAM)
    exe = tmp_path / "layout"
    built = subprocess.run(["g++", *oracles.compile_flags(), str(src), "-o", str(exe)],
                           capture_output=True, text=True, timeout=110)
    assert built.returncode == 0, built.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=10, check=True).stdout.split()
    # (4,8):(8,1): 32 elements, largest offset 3*8+7 = 31. (_3,_5):(_1,_3): 15, 15 (compile-time values).
    # (2,(3,2)):(7,(1,30)): 12 elements, cosize 1*7+2*1+1*30+1 = 40; coordinate (1,(2,1)) -> 7+2+30 = 39.
    assert out == ["32", "32", "15", "15", "12", "40", "39"]


def test_cute_dsl_needs_the_minimum_version(monkeypatch):
    import importlib.metadata as md

    monkeypatch.setattr(oracles.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(md, "version", lambda name: "4.7.1")
    assert not oracles.dsl_version_ok()
    monkeypatch.setattr(md, "version", lambda name: "4.8.1")
    assert oracles.dsl_version_ok()
    monkeypatch.setattr(md, "version", lambda name: "4.10.0.dev1")
    assert oracles.dsl_version_ok()


@pytest.mark.skipif(not oracles.dsl_version_ok(), reason="nvidia-cutlass-dsl >= 4.8.1 is not installed")
def test_cute_dsl_host_jit_runs_on_this_machine(capfd):
    assert capabilities.available("cute-dsl")
    import cutlass.cute as cute_dsl

    @cute_dsl.jit
    def show():
        layout = cute_dsl.make_layout((4, 8), stride=(8, 1))
        print(layout, cute_dsl.size(layout), cute_dsl.cosize(layout))

    show()
    assert "(4,8):(8,1) 32 32" in capfd.readouterr().out
