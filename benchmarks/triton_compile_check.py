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

import pytest

os.environ["TRITON_INTERPRET"] = "0"  # set before Triton is imported; the course plugin leaves it alone then

_RESULTS: dict[tuple, str] = {}

_DTYPES = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1",
}


def _arg_type(value):
    import torch

    if isinstance(value, torch.Tensor):
        return "*" + _DTYPES[str(value.dtype).removeprefix("torch.")]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    if value is None:
        return "constexpr"
    raise TypeError(f"no Triton type for {type(value).__name__}")


def _compile(jit_fn, args, kwargs, target):
    import triton
    from triton.compiler import ASTSource

    opts = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "num_ctas", "maxnreg") if k in kwargs}
    bound = jit_fn.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    signature, constexprs = {}, {}
    for param in jit_fn.params:
        value = bound.arguments[param.name]
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constexprs[param.name] = value
        else:
            signature[param.name] = _arg_type(value)
            if signature[param.name] == "constexpr":
                constexprs[param.name] = value
    key = (jit_fn.__name__, tuple(sorted(signature.items())), tuple(sorted((k, str(v)) for k, v in constexprs.items())),
           tuple(sorted(opts.items())))
    if key in _RESULTS:
        return
    try:
        triton.compile(ASTSource(jit_fn, signature, constexprs), target=target, options=opts)
        _RESULTS[key] = "ok"
    except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the run
        _RESULTS[key] = f"FAILED: {type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
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
        _compile(self, args, dict(kwargs), target)

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
    for (name, sig, consts, opts), status in sorted(_RESULTS.items()):
        failed += status != "ok"
        if status != "ok" or os.environ.get("COMPILE_CHECK_VERBOSE"):
            tr.write_line(f"{status:8s} {name} {dict(consts)} {dict(opts)} {[t for _, t in sig if t != 'constexpr']}")
    tr.write_line(f"{len(_RESULTS)} kernel specializations compiled, {failed} failed")
