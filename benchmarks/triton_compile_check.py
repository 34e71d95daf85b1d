"""Compile every Triton kernel that module 03's tests launch for sm_90 (H100/H200) — no GPU needed.

A pytest plugin: with it loaded, a kernel launch does not run; it compiles the kernel with the launch's
argument types and meta-parameters for `--compile-target` (default cuda:90) through ptxas and records
the result. Test assertions then fail (nothing was computed) — ignore them; the summary at the end
lists each distinct (kernel, signature) and whether it compiled. This catches what the interpreter
cannot: type errors in loop-carried values, illegal dot shapes, unsupported ops, shared-memory overflow.

    TRITON_INTERPRET=0 python -m pytest -p benchmarks.triton_compile_check modules/03-triton -q -p no:randomly
    # against another Triton (e.g. the version on the device machine), put it first on PYTHONPATH
"""

from __future__ import annotations

import os
import traceback

os.environ["TRITON_INTERPRET"] = "0"  # set before Triton is imported; the course plugin leaves it alone then

_RESULTS: dict[tuple, str] = {}

def _compile(jit_fn, args, kwargs, target):
    """Compile exactly as JITFunction.run would on a device of `target`: same binder, same specialization
    (16-byte-aligned pointers and multiples of 16 get tt.divisibility, ints equal to 1 become constants)."""
    import triton
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(target)
    binder = create_function_from_signature(jit_fn.signature, jit_fn.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jit_fn._pack_args(backend, kwargs, bound_args, specialization, options)
    key = (jit_fn.__name__, str(signature), str(sorted(constexprs.items(), key=str)), str(attrs),
           options.num_warps, options.num_stages)
    if key in _RESULTS:
        return
    try:
        kernel = triton.compile(ASTSource(jit_fn, signature, constexprs, attrs), target=target,
                                options=options.__dict__)
        ttgir = kernel.asm.get("ttgir", "")
        pipelined = "async_copy_global_to_local" in ttgir or "async_tma_copy" in ttgir
        _RESULTS[key] = (f"ok: smem {kernel.metadata.shared} B"
                         f"{', pipelined' if pipelined else ''}{', wgmma' if 'warp_group_dot' in ttgir else ''}")
    except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the run
        lines = str(exc).strip().splitlines()
        _RESULTS[key] = f"FAILED: {type(exc).__name__}: {lines[-1] if lines else ''}"
        if os.environ.get("COMPILE_CHECK_VERBOSE"):
            traceback.print_exc()


def pytest_addoption(parser):
    parser.addoption("--compile-target", default="cuda:90", help="backend:arch, e.g. cuda:90 or cuda:80")


def pytest_configure(config):
    from triton.backends.compiler import GPUTarget
    from triton.runtime import autotuner, jit

    backend, arch = config.getoption("--compile-target").split(":")
    target = GPUTarget(backend, int(arch), 32)

    def run(self, *args, grid, warmup, **kwargs):
        _compile(self, args, kwargs, target)

    def autotuned_run(self, *args, **kwargs):
        for cfg in self.configs:
            merged = {**kwargs, **cfg.all_kwargs()}
            self.fn.run(*args, grid=None, warmup=False, **merged)

    jit.JITFunction.run = run
    autotuner.Autotuner.run = autotuned_run


def pytest_terminal_summary(terminalreporter):
    import triton

    tr = terminalreporter
    tr.section(f"Triton {triton.__version__} compile check")
    failed = 0
    for (name, sig, consts, _attrs, warps, stages), status in sorted(_RESULTS.items()):
        failed += not status.startswith("ok")
        if not status.startswith("ok") or os.environ.get("COMPILE_CHECK_VERBOSE"):
            tr.write_line(f"{status}  {name} {consts} warps={warps} stages={stages} {sig}")
    tr.write_line(f"{len(_RESULTS)} kernel specializations compiled, {failed} failed")
