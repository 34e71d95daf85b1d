"""Checks for Triton kernels run by Triton's CPU interpreter (`TRITON_INTERPRET=1`).

- Bounds: every active lane of every load, store and atomic must fall inside one tensor argument of the
  launch, taken as the view the kernel was given (data_ptr + what its sizes and strides cover, never the
  whole storage, never the gaps between a strided view's rows). A violation raises
  `TritonOutOfBoundsError` before the memory is touched.
- tf32: `tl.dot` on fp32 operands with input_precision "tf32" (explicit, or Triton's default) rounds both
  operands to tf32 first, as the GPU's tensor cores do, so a kernel that forgets input_precision="ieee"
  gets the same accuracy on a CPU as on an H200.

`install()` patches the interpreter in this process (idempotent); the plugin calls
`enable_for_interpreter()` whenever it selects the interpreter. Environment:
`HPCCOURSE_TRITON_SANITIZE=0` turns the bounds check off; `HPCCOURSE_TRITON_TF32=off|truncate|rne`
(default truncate) sets the tf32 emulation. See README.md.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from .bounds import Extent, TritonOutOfBoundsError, check, collect, extent_of
from .tf32 import MODES as TF32_MODES
from .tf32 import round_to_tf32

__all__ = ["Extent", "TritonGuardError", "TritonOutOfBoundsError", "check", "collect", "enable_for_interpreter",
           "extent_of", "install", "installed", "round_to_tf32", "settings", "uninstall"]

# Builder methods and their positional layout, identical in triton 3.2 through 3.9 (the range checked).
_BUILDER_HOOKS = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas", "create_dot")
_EXECUTOR_HOOKS = ("__call__", "_init_args_hst")


class TritonGuardError(RuntimeError):
    """The installed triton's interpreter does not have the internals this guard hooks."""


class _Launch:
    __slots__ = ("extents", "kernel")

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        self.extents: list[Extent] | None = None


class _State:
    def __init__(self) -> None:
        self.originals: dict[tuple[type, str], Any] = {}
        self.launch: _Launch | None = None
        self.bounds = True
        self.tf32 = "truncate"
        self.counts = {"launches": 0, "checked": 0}


_state = _State()


def settings() -> dict[str, Any]:
    """What is active now: {"installed", "bounds", "tf32", "launches", "checked"}."""
    return {"installed": installed(), "bounds": _state.bounds, "tf32": _state.tf32, **_state.counts}


def installed() -> bool:
    return bool(_state.originals)


def _interpreter() -> Any:
    try:
        import triton
        from triton.runtime import interpreter
    except ImportError as exc:
        raise TritonGuardError(f"triton's interpreter cannot be imported: {exc}") from exc
    version = tuple(int(p) for p in triton.__version__.split(".")[:2] if p.isdigit())
    if version < (3, 2):
        raise TritonGuardError(f"triton {triton.__version__} is older than 3.2, the oldest interpreter this "
                               "guard knows; install triton>=3.2 or set HPCCOURSE_TRITON_SANITIZE=0 HPCCOURSE_TRITON_TF32=off")
    missing = [f"InterpreterBuilder.{n}" for n in _BUILDER_HOOKS if not hasattr(interpreter.InterpreterBuilder, n)]
    missing += [f"GridExecutor.{n}" for n in _EXECUTOR_HOOKS if not hasattr(interpreter.GridExecutor, n)]
    for name in ("interpreter_builder", "InterpreterError", "_ir", "tl"):
        if not hasattr(interpreter, name):
            missing.append(name)
    if not missing and not hasattr(getattr(interpreter._ir, "INPUT_PRECISION", None), "TF32"):
        missing.append("_ir.INPUT_PRECISION.TF32")
    if missing:
        raise TritonGuardError(f"triton {triton.__version__}: its interpreter moved ({', '.join(missing)} not found); "
                               "pytest_hpccourse.runtimes.triton.guard must be updated for it (or set "
                               "HPCCOURSE_TRITON_SANITIZE=0 HPCCOURSE_TRITON_TF32=off to run unguarded)")
    return interpreter


def install(bounds: bool = True, tf32: str = "truncate") -> None:
    """Patch triton's interpreter in this process; calling again only changes the settings."""
    if tf32 not in (*TF32_MODES, "off"):
        raise ValueError(f"tf32 must be one of {(*TF32_MODES, 'off')}, got {tf32!r}")
    _state.bounds = bounds
    _state.tf32 = tf32
    if installed():
        return
    interp = _interpreter()
    builder_cls = interp.InterpreterBuilder
    executor_cls = interp.GridExecutor
    tf32_enum = interp._ir.INPUT_PRECISION.TF32
    interpreter_error = interp.InterpreterError
    builder = interp.interpreter_builder
    bf16, fp32 = interp.tl.bfloat16, interp.tl.float32

    def program() -> tuple[int, ...] | None:
        idx = getattr(builder, "grid_idx", None)
        return tuple(int(i) for i in idx) if idx is not None else None

    def guard(op: str, handle: Any, mask: Any) -> None:
        __tracebackhide__ = True
        launch = _state.launch
        if not _state.bounds or launch is None or launch.extents is None:
            return
        element = handle.get_element_ty()
        nbytes = max(1, element.primitive_bitwidth // 8)
        _state.counts["checked"] += 1
        # triton 3.2's block pointers pass a bare numpy mask; every other path a TensorHandle
        lanes = mask if mask is None or isinstance(mask, np.ndarray) else mask.data
        check(launch.extents, handle.data, lanes, nbytes, op=op, kernel=launch.kernel, program=program())

    originals = {name: getattr(builder_cls, name) for name in _BUILDER_HOOKS}
    originals.update({name: getattr(executor_cls, name) for name in _EXECUTOR_HOOKS})

    def create_masked_load(self: Any, ptrs: Any, mask: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        guard("load", ptrs, mask)
        return originals["create_masked_load"](self, ptrs, mask, *args, **kwargs)

    def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        guard("store", ptrs, mask)
        return originals["create_masked_store"](self, ptrs, value, mask, *args, **kwargs)

    def create_atomic_rmw(self: Any, rmw_op: Any, ptr: Any, val: Any, mask: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        guard("atomic", ptr, mask)
        return originals["create_atomic_rmw"](self, rmw_op, ptr, val, mask, *args, **kwargs)

    def create_atomic_cas(self: Any, ptr: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        guard("atomic_cas", ptr, None)
        return originals["create_atomic_cas"](self, ptr, *args, **kwargs)

    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, *args: Any, **kwargs: Any) -> Any:
        if (_state.tf32 != "off" and input_precision == tf32_enum
                and a.data.dtype == np.float32 and b.data.dtype == np.float32):
            a = type(a)(round_to_tf32(a.data, _state.tf32), a.dtype)
            b = type(b)(round_to_tf32(b.data, _state.tf32), b.dtype)
        # The interpreter keeps bf16 as raw uint16 bits and its dot multiplies those integers; widen them
        # to the fp32 values they stand for (exact), as the tensor cores do.
        if a.dtype == bf16 and b.dtype == bf16 and a.data.dtype == np.uint16 and b.data.dtype == np.uint16:
            a = type(a)(_bf16_to_f32(a.data), fp32)
            b = type(b)(_bf16_to_f32(b.data), fp32)
        return originals["create_dot"](self, a, b, d, input_precision, *args, **kwargs)

    def init_args_hst(self: Any, args_dev: Any, kwargs: Any) -> Any:
        args_hst, kwargs_hst = originals["_init_args_hst"](self, args_dev, kwargs)
        launch = _state.launch
        if launch is not None:
            # The pointers the kernel sees are those of the host copies (the interpreter copies device
            # tensors' storages to the CPU; CPU tensors are used in place).
            launch.extents = collect(_named(self, args_hst, kwargs_hst))
        return args_hst, kwargs_hst

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        outer = _state.launch
        _state.launch = _Launch(getattr(self.fn, "__name__", "kernel"))
        _state.counts["launches"] += 1
        try:
            return originals["__call__"](self, *args, **kwargs)
        except interpreter_error as exc:
            cause = _cause(exc)
            if cause is None:
                raise
            raise cause from None
        finally:
            _state.launch = outer

    patched = {"create_masked_load": create_masked_load, "create_masked_store": create_masked_store,
               "create_atomic_rmw": create_atomic_rmw, "create_atomic_cas": create_atomic_cas,
               "create_dot": create_dot}
    for name, fn in patched.items():
        functools.update_wrapper(fn, originals[name])
        setattr(builder_cls, name, fn)
        _state.originals[(builder_cls, name)] = originals[name]
    for name, fn in (("_init_args_hst", init_args_hst), ("__call__", call)):
        functools.update_wrapper(fn, originals[name])
        setattr(executor_cls, name, fn)
        _state.originals[(executor_cls, name)] = originals[name]
    _fix_scalar_index(interp)


def _fix_scalar_index(interp: Any) -> None:
    """Triton <= 3.6's interpreter turns a scalar into an index with `int(handle.data)`, but scalars are
    1-element arrays there, which NumPy >= 2.4 refuses (TypeError "only 0-dimensional arrays can be
    converted"): any `range(0, K, BLOCK_K)` over a runtime K fails before the kernel runs. Later triton
    squeezes the array first (triton 3.9 interpreter.py, `_patch_lang_tensor`); do the same here."""
    patch_tensor = getattr(interp, "_patch_lang_tensor", None)
    if patch_tensor is None:
        return

    def patch_lang_tensor(tensor: Any, scope: Any) -> Any:
        out = patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).squeeze()))
        return out

    functools.update_wrapper(patch_lang_tensor, patch_tensor)
    interp._patch_lang_tensor = patch_lang_tensor
    _state.originals[(interp, "_patch_lang_tensor")] = patch_tensor


def uninstall() -> None:
    """Restore the interpreter's own methods."""
    for (cls, name), original in _state.originals.items():
        setattr(cls, name, original)
    _state.originals.clear()
    _state.launch = None


def enable_for_interpreter() -> bool:
    """Install with the settings from the environment when triton runs interpreted; False when not needed.

    Raises pytest.UsageError when triton is installed but its interpreter cannot be guarded: a grade
    without the guard would differ from a GPU's, so the run stops with the fix in the message.
    """
    if os.environ.get("TRITON_INTERPRET", "0") != "1":
        return False
    bounds = os.environ.get("HPCCOURSE_TRITON_SANITIZE", "1").strip().lower() not in ("0", "off", "false", "no")
    tf32 = os.environ.get("HPCCOURSE_TRITON_TF32", "truncate").strip().lower() or "truncate"
    if not bounds and tf32 == "off":
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False  # the lessons report NEEDS triton
    try:
        install(bounds=bounds, tf32=tf32)
    except (TritonGuardError, ValueError) as exc:
        import pytest

        raise pytest.UsageError(f"pytest-hpccourse: {exc}") from exc
    return True


def _named(executor: Any, args_hst: list[Any], kwargs_hst: dict[str, Any]) -> dict[str, Any]:
    import inspect

    try:
        return dict(inspect.getcallargs(executor.fn, *args_hst, **kwargs_hst))
    except TypeError:
        names = list(getattr(executor, "arg_names", []))
        named = {names[i] if i < len(names) else f"arg{i}": a for i, a in enumerate(args_hst)}
        named.update(kwargs_hst)
        return named


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _cause(exc: BaseException) -> TritonOutOfBoundsError | None:
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, TritonOutOfBoundsError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
