"""mlir-08 tests. The oracle is MLIR itself plus numpy. The learner's stages run through the real pass manager
(LLVM 22) down to PTX text, on a machine without a GPU; the IR of each stage is inspected with the bindings; the
PTX text is checked for what the mapping implies. The arithmetic and the mapping are checked by running the
outlined kernel body (the gpu.func MLIR produced, after `outline`) on the CPU: gpu_emu.py turns it into a function of
(blockIdx, threadIdx), JIT-compiles it, and runs either the whole grid or single threads. On a machine with an
NVIDIA GPU and CuPy, the PTX itself is loaded with the CUDA driver and run (that test is skipped elsewhere, never
counted as passed).

Tolerance: fp32 dot products of length K <= 70; |c - c_exact| <= 4 * (K + 2) * 2^-24 * (|A| @ |B| + |bias|).
"""

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes import mlirrun

BLOCKS = [(8, 32), (4, 64), (1, 128), (3, 5), (16, 64)]
CASES = [((37, 53, 29), b) for b in BLOCKS] + [((1, 1, 1), (8, 32)), ((64, 64, 16), (8, 32)), ((5, 130, 7), (4, 64))]


@pytest.fixture
def gl(lesson):
    return lesson.load("gpu_lower.py")


@pytest.fixture
def emu(lesson):
    return lesson.load("gpu_emu.py")


_CACHE = {}


def cached(key_parts, make):
    if key_parts not in _CACHE:
        _CACHE[key_parts] = make()
    return _CACHE[key_parts]


def lowered(gl, shape, block, order=None):
    key = ("lower", Path(gl.__file__).read_text(), shape, block, tuple(order or ()))

    def make():
        try:
            return gl.lower(gl.payload(*shape), block, order=order)
        except mlirrun.MlirError as e:
            if order:
                raise
            raise AssertionError(f"{shape}, block {block}: the pipeline failed:\n{e}") from None

    return cached(key, make)


def kernel_on_cpu(gl, emu, shape, block):
    key = ("emu", Path(gl.__file__).read_text(), shape, block)
    return cached(key, lambda: emu.KernelOnCpu(lowered(gl, shape, block)["outline"]))


def inputs(shape, rng):
    m, n, k = shape
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    return a, b, bias


CANARY = np.float32(12345.0)


def fenced(x, pad):
    """A copy of `x` at the start of a larger buffer whose tail holds CANARY: a kernel that reads or writes past the
    end stays inside memory we own (no crash) and a write there shows. Returns (view, whole buffer)."""
    whole = np.full(x.size + pad, CANARY, np.float32)
    view = whole[: x.size].reshape(x.shape)
    view[...] = x
    return view, whole


def fenced_args(shape, block, a, b, bias):
    (m, n, k), (rows, cols) = shape, block
    pad = (rows + 1) * (k + n + 1) + cols + 64  # covers every index a kernel without bounds guards could reach
    c0 = np.full((m, n), np.nan, np.float32)
    return [fenced(x, pad) for x in (a, b, bias, c0)]


def check_close(got, a, b, bias, what):
    a64, b64, bias64 = a.astype(np.float64), b.astype(np.float64), bias.astype(np.float64)
    want = np.maximum(a64 @ b64 + bias64, 0.0)
    tol = 4 * (a.shape[1] + 2) * 2.0**-24 * (np.abs(a64) @ np.abs(b64) + np.abs(bias64)) + 1e-30
    bad = ~(np.abs(got - want) <= tol)
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        raise AssertionError(f"{what}: C[{i},{j}] = {got[i, j]!r}, numpy gives {want[i, j]:.7g} "
                             f"({int(bad.sum())} of {got.size} wrong; C was NaN before the launch)")


def walk_ops(ir_text):
    """[(name, attributes as {name: str}, parent name)] for every op, pre-order."""
    from mlir import ir

    out = []
    with ir.Context() as ctx:
        module = mlirrun.parse(ir_text, ctx)

        def visit(op):
            attrs = {name: str(op.attributes[name]) for name in (getattr(a, "name", a) for a in op.attributes)}
            parent = op.parent.name if op.parent is not None else None
            out.append((op.name, attrs, parent))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out


def expected_launch(shape, block):
    (m, n, _), (rows, cols) = shape, block
    return (math.ceil(n / cols), math.ceil(m / rows), 1), (cols, rows, 1)


# ---------------------------------------------------------------------------------------------------- the tests


@pytest.mark.points(1)
def test_block_is_whole_warps_of_consecutive_columns(gl):
    rows, cols = gl.block_shape()
    assert rows >= 1 and cols >= 1 and rows * cols <= 1024, f"block_shape() = {(rows, cols)}: 1..1024 threads per block"
    assert cols % 32 == 0, (f"block_shape() = {(rows, cols)}: a warp is 32 threads consecutive in x; with {cols} columns per block "
                            "a warp spans several rows of C and its stores are no longer one contiguous 128-byte run")


@pytest.mark.points(1)
def test_map_stage_puts_blocks_outside_threads_inside_columns_on_x(gl):
    """After `map`: an scf.parallel over blocks holding one over threads, each with a `mapping`; the (i, j) loop's
    j (columns, contiguous in memory) on x, i on y."""
    for block in [tuple(gl.block_shape()), *BLOCKS]:
        ops = walk_ops(lowered(gl, (37, 53, 29), block)["map"])
        loops = [(attrs.get("mapping", ""), parent) for name, attrs, parent in ops if name == "scf.parallel"]
        assert len(loops) == 2, f"block {block}: expected 2 nested scf.parallel after `map` (blocks, threads), found {len(loops)}"
        procs = [re.findall(r"processor = (\w+)", mapping) for mapping, _ in loops]
        assert procs[0] == ["block_y", "block_x"], (
            f"block {block}: the outer loop (i, j) is mapped to {procs[0]}; expected [block_y, block_x] (j -> x)")
        want_inner = ["thread_y", "thread_x"][-len(procs[1]):] if procs[1] else ["thread_y", "thread_x"]
        assert procs[1] == want_inner, (
            f"block {block}: the inner loop is mapped to {procs[1]}; expected {want_inner} (j -> threadIdx.x)")


@pytest.mark.points(1)
def test_launch_dimensions_and_kernel_interface(gl, emu):
    """After `outline`: one gpu.launch_func whose grid and block are ceil-div of the problem (x = columns), as the
    learner's launch_shape() also says; the kernel takes exactly the four memrefs."""
    for shape, block in CASES + [((37, 53, 29), tuple(gl.block_shape()))]:
        launch = emu.find_launch(lowered(gl, shape, block)["outline"])
        want = expected_launch(shape, block)
        assert (launch.grid, launch.block) == want, (
            f"{shape}, block {block}: gpu.launch_func has grid {launch.grid}, threads {launch.block}; expected {want}")
        got = tuple(tuple(int(v) for v in t) for t in gl.launch_shape(shape[0], shape[1], block))
        assert got == want, f"launch_shape({shape[0]}, {shape[1]}, {block}) = {got}; the lowering launches {want}"
        m, n, k = shape
        types = [f"memref<{m}x{k}xf32>", f"memref<{k}x{n}xf32>", f"memref<{n}xf32>", f"memref<{m}x{n}xf32>"]
        assert launch.arg_types == types, (
            f"{shape}, block {block}: the kernel takes {launch.arg_types}; only the four memrefs should cross to the "
            "device (constants belong inside the kernel)")


@pytest.mark.points(1)
def test_each_stage_holds_what_it_should(gl):
    irs = lowered(gl, (37, 53, 29), tuple(gl.block_shape()))
    assert list(irs) == list(gl.STAGES)
    counts = {s: Counter(name for name, _, _ in walk_ops(t)) for s, t in irs.items() if s != "ptx"}
    assert counts["launch"]["gpu.launch"] == 1 and not counts["launch"]["scf.parallel"], (
        f"after `launch`: {counts['launch']['gpu.launch']} gpu.launch, {counts['launch']['scf.parallel']} scf.parallel; "
        "expected the loop nest to be one gpu.launch")
    out = counts["outline"]
    assert out["gpu.launch_func"] == 1 and out["gpu.func"] == 1 and not out["gpu.launch"], (
        f"after `outline`: {out['gpu.launch_func']} launch_func, {out['gpu.func']} gpu.func, {out['gpu.launch']} gpu.launch")
    ops = walk_ops(irs["nvvm"])
    modules = [attrs for name, attrs, _ in ops if name == "gpu.module"]
    target_ok = [re.search(r'#nvvm\.target<[^>]*chip = "sm_90"', t) and re.search(r'#nvvm\.target<[^>]*features = "\+ptx80"', t)
                 for t in (a.get("targets", "") for a in modules)]
    assert modules and all(target_ok), (
        f"after `nvvm`: gpu.module targets {[a.get('targets') for a in modules]}; expected an NVVM target for sm_90, +ptx80")
    inside = Counter(name for name, _, parent in ops if parent in ("gpu.module", "llvm.func"))
    assert inside["llvm.func"] >= 1 and not inside["gpu.func"], f"after `nvvm` the kernel is not an llvm.func: {dict(inside)}"
    assert any(name.startswith("nvvm.read.ptx.sreg.tid") for name, _, _ in ops), "after `nvvm`: no nvvm thread-index read"
    assert gl.ptx_of(irs["ptx"]), "after `ptx`: no gpu.binary"


@pytest.mark.points(2)
def test_kernel_body_computes_the_mlp(gl, emu):
    """The outlined kernel run on the CPU over its whole grid equals numpy; C sits in a larger buffer whose tail must
    stay untouched (a missing bounds guard writes past the end)."""
    rng = np.random.default_rng(808)
    for shape, block in CASES + [((37, 53, 29), tuple(gl.block_shape()))]:
        kernel = kernel_on_cpu(gl, emu, shape, block)
        m, n, _ = shape
        for _ in range(2):
            a, b, bias = inputs(shape, rng)
            args = fenced_args(shape, block, a, b, bias)
            kernel.run(*(view for view, _ in args))
            for (view, whole), name in zip(args, "A B bias C".split()):
                assert (whole[view.size:] == CANARY).all(), f"{shape}, block {block}: the kernel wrote past the end of {name}"
            check_close(args[3][0], a, b, bias, f"{shape}, block {block}")


@pytest.mark.points(1)
def test_each_thread_writes_its_own_element(gl, emu):
    """Thread (tx, ty) of block (bx, by) writes C[by*rows + ty, bx*cols + tx] and nothing else; a thread past the edge
    writes nothing. So 32 consecutive threadIdx.x write 32 consecutive floats of one row (one coalesced store)."""
    rng = np.random.default_rng(9)
    shape = (37, 53, 29)
    for block in [tuple(gl.block_shape()), (8, 32), (3, 5), (4, 64)]:
        kernel = kernel_on_cpu(gl, emu, shape, block)
        rows, cols = block
        (gx, gy, _), _ = expected_launch(shape, block)
        a, b, bias = inputs(shape, rng)
        probes = {(bx, by, tx, ty) for bx in (0, gx - 1) for by in (0, gy - 1)
                  for tx in (0, 1, cols - 1) for ty in (0, rows - 1)}
        for bx, by, tx, ty in sorted(probes):
            args = fenced_args(shape, block, a, b, bias)
            kernel.thread((bx, by, 0), (tx, ty, 0), *(view for view, _ in args))
            c, whole = args[3]
            assert (whole[c.size:] == CANARY).all(), (
                f"block {block}: thread (x={tx}, y={ty}) of block (x={bx}, y={by}) wrote past the end of C")
            written = [tuple(map(int, p)) for p in np.argwhere(~np.isnan(c))]
            i, j = by * rows + ty, bx * cols + tx
            want = [(i, j)] if i < 37 and j < 53 else []
            assert written == want, (f"block {block}: thread (x={tx}, y={ty}) of block (x={bx}, y={by}) wrote {written}; "
                                     f"expected {want} (row = blockIdx.y*{rows} + threadIdx.y, col = blockIdx.x*{cols} + threadIdx.x)")


def ptx_text(gl, shape, block):
    found = gl.ptx_of(lowered(gl, shape, block)["ptx"])
    assert len(found) == 1, f"{shape}, block {block}: expected one gpu.binary, found {sorted(found)}"
    return next(iter(found.values()))


def ctaid_x_is_scaled_by(ptx, cols):
    """Some instruction multiplies %ctaid.x (or a copy / conversion of it) by `cols` (shl by log2 for powers of 2)."""
    regs = set(re.findall(r"mov\.u32\s+(%r\d+), %ctaid\.x;", ptx))
    for line in ptx.splitlines():  # follow register copies and widenings: mov / cvt %dst, %src
        m = re.match(r"\s*(?:mov|cvt)\.[\w.]+\s+(%\w+), (%\w+);", line)
        if m and m.group(2) in regs:
            regs.add(m.group(1))
    imms = {str(cols)} | ({str(cols.bit_length() - 1)} if cols & (cols - 1) == 0 else set())
    alt, imm = "|".join(map(re.escape, regs)) or "$^", "|".join(imms)
    return any(re.search(rf"^\s*(?:mul|mad|shl)[\w.]*\s+%\w+, (?:{alt}), (?:{imm})[,;]", line) for line in ptx.splitlines())


@pytest.mark.points(1)
def test_ptx_is_an_sm90_kernel_reading_the_mapped_indices(gl):
    for shape, block in [((37, 53, 29), tuple(gl.block_shape())), ((37, 53, 29), (3, 5)), ((5, 130, 7), (4, 64)), ((37, 53, 29), (1, 128)),
                         ((5, 130, 7), (8, 32))]:  # (1, 128): tid.y and ctaid.x folded; (8, 32) on 5 rows: ctaid.y folded
        ptx = ptx_text(gl, shape, block)
        what = f"PTX for {shape}, block {block}"
        assert re.search(r"^\.version 8\.0$", ptx, re.M), f"{what}: not PTX ISA 8.0"
        assert re.search(r"^\.target sm_90$", ptx, re.M), f"{what}: not `.target sm_90`"
        assert re.search(r"^\.address_size 64$", ptx, re.M), f"{what}: no `.address_size 64`"
        entries = re.findall(r"^\.visible \.entry (\w+)\(", ptx, re.M)
        assert len(entries) == 1, f"{what}: expected one `.visible .entry` kernel, found {entries}"
        rows, cols = block
        assert re.search(rf"^\.maxntid {cols}, {rows}, 1$", ptx, re.M), f"{what}: no `.maxntid {cols}, {rows}, 1`"
        (gx, gy, _), _ = expected_launch(shape, block)
        reads = set(re.findall(r"%(tid|ctaid)\.([xyz])", ptx))  # an index that is always 0 (extent 1) is folded away
        want = {r for r, used in [(("tid", "x"), cols > 1), (("tid", "y"), rows > 1), (("ctaid", "x"), gx > 1),
                                  (("ctaid", "y"), gy > 1)] if used}
        assert reads == want, f"{what}: special registers read {sorted(reads)}; the mapping needs {sorted(want)}"
        assert gx == 1 or ctaid_x_is_scaled_by(ptx, cols), (
            f"{what}: %ctaid.x is never multiplied by the {cols} columns of a block (blockIdx.x should index column tiles)")
        assert len(re.findall(r"\bld\.global\.", ptx)) >= 3 and re.search(r"\bst\.global\.", ptx), (
            f"{what}: expected ld.global for A, B, bias and st.global for C")
        assert ".local" not in ptx, f"{what}: uses local memory (a stack frame) -- the kernel should live in registers"


@pytest.mark.points(1)
def test_wrong_order_fails_with_mlirs_own_error(gl):
    """NVVM lowering before outlining: there is no gpu.module yet to attach the target to, so the kernel module
    outlined later has no target and gpu-module-to-binary refuses it. The stages in order produce PTX."""
    assert ptx_text(gl, (37, 53, 29), tuple(gl.block_shape()))
    with pytest.raises(mlirrun.MlirError, match=r"error: "):
        ir = lowered(gl, (37, 53, 29), tuple(gl.block_shape()), order=["map", "launch", "nvvm", "outline", "ptx"])["ptx"]
        assert gl.ptx_of(ir), "no PTX"  # pragma: no cover - reaching here means no error was raised


@pytest.mark.points(2)
@pytest.mark.requires("cuda-gpu")
def test_ptx_runs_on_the_gpu(gl, emu, tmp_path):
    """Load the PTX with the CUDA driver (CuPy RawModule) and launch it as MLIR's gpu.launch_func would: each memref
    argument expanded to (allocated ptr, aligned ptr, offset, sizes..., strides...) unless the kernel takes bare
    pointers."""
    import cupy as cp

    rng = np.random.default_rng(2026)
    for shape, block in CASES + [((37, 53, 29), tuple(gl.block_shape())), ((300, 257, 70), tuple(gl.block_shape()))]:
        ptx = ptx_text(gl, shape, block)
        name = re.search(r"^\.visible \.entry (\w+)\(", ptx, re.M).group(1)
        n_params = len(re.findall(r"\.param \.\w+ (?:\.ptr [^,\n]*?)?\w+_param_\d+", ptx))
        path = tmp_path / f"k{len(list(tmp_path.iterdir()))}.ptx"
        path.write_text(ptx)
        kernel = cp.RawModule(path=str(path)).get_function(name)
        launch = emu.find_launch(lowered(gl, shape, block)["outline"])
        a, b, bias = inputs(shape, rng)
        m, n, _ = shape
        dev = [cp.asarray(x) for x in (a, b, bias)] + [cp.full((m, n), cp.nan, dtype=cp.float32)]
        if n_params == len(dev):
            args = dev
        else:
            args = []
            for x in dev:
                strides = [s // x.itemsize for s in x.strides]
                args += [x, x, np.int64(0), *map(np.int64, x.shape), *map(np.int64, strides)]
            assert n_params == len(args), f"kernel {name} takes {n_params} parameters, expected {len(args)} or 4"
        kernel(launch.grid, launch.block, tuple(args))
        cp.cuda.runtime.deviceSynchronize()
        check_close(cp.asnumpy(dev[3]), a, b, bias, f"GPU run of {shape}, block {block}")
