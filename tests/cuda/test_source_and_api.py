"""The source scanner/rewriter, argument checking, build errors and the API's corners."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda
from pytest_hpccourse.runtimes.cuda import cpu, source

KERNELS = Path(__file__).parent / "kernels"
emulator = pytest.mark.skipif(not cuda.emulator_available(), reason="no C++ compiler for the CUDA emulator")


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


# ----------------------------------------------------------------------------- scanner

def test_mask_keeps_offsets_and_lines():
    text = 'a /* x\n y */ "s//t" // c\nchar c = \'"\'; R"(raw\n)" 1\'000;\n#define X __global__\n'
    m = source.mask_source(text, preprocessor=True)
    assert len(m) == len(text) and m.count("\n") == text.count("\n")
    assert "x" not in m and "//" not in m and "raw" not in m and "__global__" not in m and "1'000" in m


def test_find_kernels_and_params():
    text = textwrap.dedent("""
        // __global__ void not_a_kernel(int);
        extern "C" __global__ void __launch_bounds__(256, 2) k1(const float* __restrict__ x, float *y,
                                                               int n, unsigned long long m) {}
        template <typename T, int BLOCK = 128>
        __global__ void k2(T* out, const T* in, T alpha, size_t n) {}
        static __global__ void k3() {}
        __device__ int helper(int a) { return a; }
    """)
    ks = {k.name: k for k in source.find_kernels(text)}
    assert list(ks) == ["k1", "k2", "k3"]
    assert ks["k1"].line == 3 and not ks["k1"].is_template
    p = ks["k1"].params()
    assert [x.name for x in p] == ["x", "y", "n", "m"]
    assert (p[0].is_ptr, p[0].is_const, p[0].kind, p[0].elem_size) == (True, True, "f", 4)
    assert (p[1].is_ptr, p[1].is_const) == (True, False)
    assert (p[2].kind, p[2].size, p[3].kind, p[3].size) == ("i", 4, "u", 8)
    assert ks["k2"].template_params == [("type", "T", None), ("value", "BLOCK", "128")]
    q = ks["k2"].params(["__half"])
    assert (q[0].kind, q[0].elem_size, q[1].is_const, q[2].kind, q[2].size, q[3].size) == ("h", 2, True, "h", 2, 8)
    assert ks["k3"].params() == []
    assert source.split_template_name("k2<float, 64>") == ("k2", ["float", "64"])


@emulator
def test_text_parse_agrees_with_the_compiler():
    """The GPU backend packs scalars from the text parse; the emulator from what g++ says."""
    for f in sorted(KERNELS.glob("*.cu")):
        if f.name in ("bugs.cu",):
            continue
        mod = cuda.load(f, backend="cpu", nvcc_check=False)
        for name in mod.kernel_names:
            k = mod._src_kernels[name]
            if k.is_template:
                continue
            text = k.params()
            described = mod._build("fast").kernels[name]["params"]
            for t, d in zip(text, described, strict=True):
                assert t.is_ptr == bool(d["ptr"]), (f.name, name, t)
                assert t.is_const == bool(d["const"]), (f.name, name, t)
                if t.is_ptr:
                    assert t.elem_size in (0, d["elem_size"]), (f.name, name, t)
                else:
                    assert t.size == d["size"] and t.kind == d["kind"], (f.name, name, t)


def test_rewrite_keeps_lines_and_rewrites_shared_and_launches():
    text = textwrap.dedent("""
        extern __shared__ float dyn[];
        __global__ void k(float* p) {
            __shared__ __align__(16) float a[32], b[4][33];
            __shared__ int
                counter;
            volatile __shared__ float *vp;
            a[0] = 1;
        }
        int main() { k<<<dim3(2, 1),
                       32, 0>>>(nullptr); k<<<1, 1>>>(0); }
    """).lstrip("\n")
    out = source.rewrite_for_emulator(text)
    assert out.count("\n") == text.count("\n")
    lines = out.splitlines()
    assert "smem_extern<" in lines[0] and '"dyn"' in lines[0]
    assert 'smem_ref<hpc_smem_t2_>(16, "a"' in lines[2] and '"b"' in lines[2] and "[4][33]" in lines[2]
    assert '"counter"' in lines[3] and lines[4].strip() == ""
    assert "typedef volatile float *hpc_smem" in lines[5]
    flat = " ".join(" ".join(lines[8:]).split())
    assert "k * ::hpc::Cfg(dim3(2, 1), 32, 0) (nullptr)" in flat and "k * ::hpc::Cfg(1, 1)(0)" in flat


def test_unsupported_features_are_named_with_their_line(tmp_path):
    p = write(tmp_path, "bad.cu", """
        #include <cooperative_groups.h>
        namespace cg = cooperative_groups;
        __global__ void k(float* x) {
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {...};");
            float v = tex1Dfetch<float>(0, 1);
            __pipeline_memcpy_async(x, x + 1, 4);
        }
    """)
    found = source.scan_unsupported(p.read_text())
    assert [(u.line, u.feature.split()[0]) for u in found] == [
        (1, "cooperative"), (2, "cooperative"), (4, "inline"), (5, "textures"), (6, "asynchronous")]
    if cuda.emulator_available():
        with pytest.raises(cuda.CudaUnsupportedError) as e:
            cuda.load(p, backend="cpu")
        assert e.value.line == 1 and "bad.cu:4: inline PTX assembly" in str(e.value)


# ----------------------------------------------------------------------------- builds

@emulator
def test_compile_error_names_file_and_line(tmp_path):
    p = write(tmp_path, "typo.cu", """
        __global__ void k(float* x, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] = undefined_thing * 2.0f;
        }
    """)
    with pytest.raises(cuda.CudaCompileError) as e:
        cuda.load(p, backend="cpu")
    assert e.value.line == 3 and e.value.file.endswith("typo.cu")
    assert "undefined_thing" in str(e.value)


@emulator
@pytest.mark.skipif(cpu._nvcc() is None, reason="nvcc not on PATH (or HPCCOURSE_CUDA_NVCC=0)")
def test_nvcc_rejects_what_gxx_accepts(tmp_path):
    p = write(tmp_path, "hostcall.cu", """
        #include <cstdlib>
        __global__ void k(int* x) {
            x[threadIdx.x] = rand();   // a host function: nvcc refuses, g++ would not
        }
    """)
    with pytest.raises(cuda.CudaCompileError) as e:
        cuda.load(p, backend="cpu")
    assert e.value.line == 3 and "nvcc" in str(e.value)
    cuda.load(p, backend="cpu", nvcc_check=False)   # the emulator alone accepts it


@emulator
def test_builds_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCCOURSE_CACHE", str(tmp_path / "cache"))
    p = write(tmp_path, "k.cu", "__global__ void k(int* x) { x[threadIdx.x] = threadIdx.x; }\n")
    calls = []
    real = cpu._compile
    monkeypatch.setattr(cpu, "_compile", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    cuda.load(p, backend="cpu", nvcc_check=False)
    cuda.load(p, backend="cpu", nvcc_check=False)
    assert len(calls) == 1
    p.write_text("__global__ void k(int* x) { x[threadIdx.x] = 2 * threadIdx.x; }\n")
    m = cuda.load(p, backend="cpu", nvcc_check=False)
    assert len(calls) == 2
    x = np.zeros(4, np.int32)
    m.k[1, 4](x)
    assert x.tolist() == [0, 2, 4, 6]


@emulator
def test_defines_and_printf(tmp_path, capfd):
    p = write(tmp_path, "p.cu", """
        #include <cstdio>
        __global__ void k(int* x) {
            x[threadIdx.x] = SCALE * threadIdx.x;
            if (threadIdx.x == 1) printf("hello from thread %d\\n", threadIdx.x);
        }
    """)
    m = cuda.load(p, backend="cpu", defines={"SCALE": 3})
    x = np.zeros(4, np.int32)
    m.k[1, 4](x)
    assert x.tolist() == [0, 3, 6, 9]
    assert "hello from thread 1" in capfd.readouterr().out


# ----------------------------------------------------------------------------- arguments & launches

@pytest.fixture(scope="module")
def red():
    if not cuda.emulator_available():
        pytest.skip("no C++ compiler for the CUDA emulator")
    return cuda.load(KERNELS / "reduce.cu", backend="cpu")


def test_argument_checks(red):
    x = np.ones(10, np.float32)
    with pytest.raises(cuda.CudaArgumentError, match="points to float32 elements but got an array of float64"):
        red.block_sum[1, 32, 128](x.astype(np.float64), np.zeros(1, np.float32), 10)
    with pytest.raises(cuda.CudaArgumentError, match="takes 3 arguments, got 2"):
        red.block_sum[1, 32, 128](x, np.zeros(1, np.float32))
    with pytest.raises(TypeError, match="integer parameter but got 2.5"):
        red.block_sum[1, 32, 128](x, np.zeros(1, np.float32), 2.5)
    with pytest.raises(cuda.CudaArgumentError, match="is a pointer"):
        red.block_sum[1, 32, 128](3, np.zeros(1, np.float32), 10)
    with pytest.raises(cuda.CudaArgumentError, match="does not fit in int32"):
        red.block_sum[1, 32, 128](x, np.zeros(1, np.float32), 2**40)
    with pytest.raises(AttributeError, match="no __global__ function `nope`"):
        _ = red.nope
    with pytest.raises(AttributeError, match="template kernel"):
        _ = red.scale
    with pytest.raises(cuda.CudaCompileError, match="could not instantiate kernel `scale<flaot>`"):
        red["scale<flaot>"][1, 32](x, 1.0, 10)


def test_launch_checks(red):
    x, out = np.ones(10, np.float32), np.zeros(1, np.float32)
    with pytest.raises(cuda.CudaLaunchError, match="more than 1024 threads per block"):
        red.block_sum[1, 2048, 128](x, out, 10)
    with pytest.raises(cuda.CudaLaunchError, match="227 KiB"):
        red.block_sum[1, 32, 300_000](x, out, 10)
    with pytest.raises(cuda.CudaLaunchError):
        red.block_sum[0, 32](x, out, 10)
    with pytest.raises(cuda.CudaArgumentError):
        red.block_sum[(1, 2, 3, 4), 32](x, out, 10)


def test_scalar_and_array_flavours(red):
    y = np.arange(8, dtype=np.float32)
    red["scale<float>"][1, 32](y, np.float32(2), np.int64(8))
    assert y.tolist() == [0, 2, 4, 6, 8, 10, 12, 14]
    strided = np.arange(16, dtype=np.float32)[::2]          # non-contiguous: copied and written back
    red["scale<float>"][1, 32](strided, 0.5, 8)
    assert strided.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    ro = np.ones(4, np.float32)
    ro.setflags(write=False)                                # read-only input to a const pointer is fine
    out = np.zeros(1, np.float32)
    red.block_sum[1, 4, 16](ro, out, 4)
    assert out[0] == 4


@emulator
def test_backend_choice_is_forced_by_the_environment():
    code = "from pytest_hpccourse.runtimes import cuda; print(cuda.backend(), cuda.available())"
    env = dict(os.environ, HPCCOURSE_CUDA="cpu")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=Path(__file__).parents[2])
    assert out.stdout.split() == ["cpu", "True"], out.stderr
