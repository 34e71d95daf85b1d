"""The GPU backend: CuPy `RawModule` (NVRTC, with CuPy's `-arch` for the device, `-std=c++17`).

Host arrays are copied in and written back; torch CUDA tensors and CuPy arrays are used in place.
NVRTC errors are reported with the learner's file:line (a `#line` directive names the file).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from . import source as src
from .args import CudaArgumentError, Dims, ParamInfo, check_pointer_dtype, host_buffer, is_cupy, is_torch, scalar_value
from .errors import (
    CudaCompileError,
    CudaError,
    CudaLaunchError,
    CudaMisalignedError,
    CudaOutOfBoundsError,
    CudaUnsupportedError,
)


@functools.cache
def available() -> bool:
    try:
        import cupy  # type: ignore[import-not-found]

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:
        return False


@functools.cache
def _cuda_include() -> str | None:
    """The CUDA toolkit's include folder (for <mma.h> and friends), when there is one."""
    cands = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    cands.append("/usr/local/cuda")
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "include", "mma.h")):
            return os.path.join(c, "include")
    return None


def arch() -> str:
    import cupy  # type: ignore[import-not-found]

    return "sm_" + str(cupy.cuda.Device().compute_capability)


# NVRTC has no host headers; source.strip_host_includes_for_nvrtc blanks their #includes and this
# prelude supplies the handful of names CUDA code takes from them.
_PRELUDE = r"""
#ifndef HPCCOURSE_NVRTC_PRELUDE
#define HPCCOURSE_NVRTC_PRELUDE 1
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#ifndef FLT_MAX
#define FLT_MAX 3.402823466e+38f
#endif
#ifndef FLT_MIN
#define FLT_MIN 1.175494351e-38f
#endif
#ifndef INT_MAX
#define INT_MAX 2147483647
#endif
#ifndef INT_MIN
#define INT_MIN (-2147483647 - 1)
#endif
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#ifndef CUDART_INF_F
#define CUDART_INF_F __int_as_float(0x7f800000)
#endif
#ifndef assert
extern "C" __device__ void __assertfail(const char*, const char*, unsigned, const char*, unsigned long long);
#define assert(e) ((e) ? (void)0 : __assertfail(#e, __FILE__, __LINE__, __func__, 1))
#endif
#endif
"""


_INT_TYPES = """
typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t; typedef long long int64_t; typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t; typedef long long intptr_t;
"""


class GpuModule:
    def __init__(self, path: Path, text: str, names: list[str], defines: dict[str, str], flags: tuple[str, ...]) -> None:
        import cupy  # type: ignore[import-not-found]

        self.path = path
        stripped = src.strip_host_includes_for_nvrtc(text)
        prelude = ""
        if stripped != text:
            prelude = _PRELUDE
            if re.search(r"#\s*include\s*<(cstdint|stdint\.h)>", text):
                prelude = _INT_TYPES + prelude
        code = prelude + f'#line 1 "{path}"\n' + stripped
        opts = ["-std=c++17", f"-I{path.parent}"]
        inc = _cuda_include()
        if inc:
            opts.append(f"-I{inc}")
        opts += [f"-D{k}={v}" if v is not None else f"-D{k}" for k, v in sorted(defines.items())]
        opts += list(flags)
        try:
            self.raw = cupy.RawModule(code=code, options=tuple(opts), name_expressions=tuple(names) or None)
            if hasattr(self.raw, "compile"):
                self.raw.compile()
            else:
                for n in names[:1]:
                    self.raw.get_function(n)
        except Exception as e:  # cupy.cuda.compiler.CompileException
            log = e.get_message() if hasattr(e, "get_message") else str(e)
            m = None
            for ln in log.splitlines():
                m = re.match(r"^(.*?)\((\d+)\): (?:catastrophic )?error: (.*)$", ln)
                if m:
                    break
            if m:
                raise CudaCompileError(f"{m.group(1)}:{m.group(2)}: {m.group(3)}\n(compiled by NVRTC)\n{log[-6000:]}",
                                       file=m.group(1), line=int(m.group(2)), kind="compile", log=log) from None
            raise CudaCompileError(f"NVRTC could not compile {path}:\n{log[-6000:]}", file=str(path), kind="compile",
                                   log=log) from None

    def launch(self, spec: str, grid: Dims, block: Dims, smem: int, args: list, params: list[ParamInfo]) -> dict:
        import cupy  # type: ignore[import-not-found]

        try:
            fn = self.raw.get_function(spec)
        except Exception as e:
            # a fault of an earlier launch is sticky: the context is unusable, and loading the module fails with it
            _raise_fault(e, spec, earlier=True)
            raise CudaLaunchError(f"no kernel `{spec}` in {self.path}: {e}", kind="launch") from None
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = int(smem)
        dev_args: list[Any] = []
        writebacks = []
        torch_sync = False
        for i, (v, p) in enumerate(zip(args, params)):
            if p.is_ptr:
                if v is None:
                    dev_args.append(np.uint64(0))
                elif is_cupy(v):
                    check_pointer_dtype(v.dtype, p, i, spec)
                    dev_args.append(v)
                elif is_torch(v) and v.is_cuda:
                    import torch

                    torch_sync = True
                    t = v.detach()
                    check_pointer_dtype(np.dtype(np.int16) if t.dtype == torch.bfloat16 else
                                        np.dtype(str(t.dtype).replace("torch.", "")), p, i, spec, torch_dtype=t.dtype)
                    if t.is_contiguous():
                        dev_args.append(np.uint64(t.data_ptr()))
                    else:
                        tc = t.contiguous()
                        dev_args.append(np.uint64(tc.data_ptr()))
                        if not p.is_const:
                            writebacks.append(lambda v=v, tc=tc: v.detach().copy_(tc))
                        writebacks.append(lambda tc=tc: None)  # keep tc alive
                else:
                    hb = host_buffer(v, p, i, spec)
                    d = cupy.asarray(hb.array)
                    dev_args.append(d)
                    if not p.is_const:
                        def wb(hb=hb, d=d):
                            hb.array[...] = d.get().reshape(hb.array.shape)
                            if hb.writeback:
                                hb.writeback()
                        writebacks.append(wb)
            else:
                if p.kind == "o" and p.size == 0:
                    raise CudaArgumentError(f"argument {i} (`{p.describe()}`) of kernel `{spec}`: the GPU backend "
                                            f"cannot tell the size of type `{p.base}`; use a standard scalar type")
                dev_args.append(scalar_value(v, p, i, spec))
        if torch_sync:
            import torch

            torch.cuda.synchronize()
        try:
            fn(tuple(grid), tuple(block), tuple(dev_args), shared_mem=int(smem))
            cupy.cuda.Device().synchronize()
        except Exception as e:
            _raise_fault(e, spec)
            raise CudaLaunchError(f"kernel `{spec}`: {e}", kind="launch", kernel=spec) from None
        for wb in writebacks:
            wb()
        return {}


def _raise_fault(e: Exception, spec: str, earlier: bool = False) -> None:
    """Raise the error of a kernel fault CuPy reported (CUDA_ERROR_ILLEGAL_ADDRESS / CUDA_ERROR_MISALIGNED_ADDRESS,
    or the runtime's names of them) as the emulator's class; return for anything else. Untested on a GPU."""
    msg = str(e)
    when = (f"a launch before `{spec}` faulted (the error is sticky: the CUDA context is unusable from then on)"
            if earlier else f"kernel `{spec}`")
    tail = " (the CUDA context is now unusable; run the emulator's checked builds to find the line)"
    if "MISALIGNED_ADDRESS" in msg or "MisalignedAddress" in msg or "misaligned address" in msg:
        raise CudaMisalignedError(f"misaligned address in {when}: {msg}{tail}; a vector access (float2/float4, ...) "
                                  f"or a WMMA load/store needs an address that is a multiple of its size (WMMA: 32 "
                                  f"bytes, ldm a multiple of 16 bytes)", kind="misaligned", kernel=spec) from None
    if "ILLEGAL_ADDRESS" in msg or "IllegalAddress" in msg or "illegal memory access" in msg:
        raise CudaOutOfBoundsError(f"{when}: {msg}{tail}", kind="gpu", kernel=spec) from None


def run_main(path: Path, argv: list[str], defines: dict[str, str], timeout: float) -> tuple[int, str, str]:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        raise CudaUnsupportedError("running a .cu program's main() on the GPU needs nvcc on PATH", kind="platform")
    with tempfile.TemporaryDirectory(prefix="hpccuda-gpu-") as tmp:
        exe = os.path.join(tmp, "prog")
        cmd = [nvcc, "-std=c++17", f"-arch={arch()}", "-o", exe, str(path)]
        cmd += [f"-D{k}={v}" if v is not None else f"-D{k}" for k, v in defines.items()]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            m = re.search(r"^(.*?)\((\d+)\): error: (.*)$", r.stderr, flags=re.M)
            raise CudaCompileError(r.stderr[-6000:], file=m.group(1) if m else str(path),
                                   line=int(m.group(2)) if m else None, kind="compile", log=r.stderr)
        p = subprocess.run([exe, *map(str, argv)], capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr


__all__ = ["available", "GpuModule", "run_main", "CudaError"]
