"""Kernel arguments: numpy arrays, torch tensors (CPU or CUDA), CuPy arrays, None, and Python /
numpy scalars, checked against the kernel's parameter types and packed as the kernel expects."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import CudaLaunchError

Dims = int | Sequence[int]  # a launch's grid or block: n, (x,), (x, y) or (x, y, z)


class CudaArgumentError(CudaLaunchError, TypeError):
    """An argument that does not fit the kernel's parameter (wrong dtype, count, a float for an int...)."""


@dataclass
class ParamInfo:
    name: str
    is_ptr: bool
    is_const: bool
    size: int          # bytes of the parameter itself
    kind: str          # scalar kind: f i u b h B o ; 'p' for pointers
    elem_size: int     # pointee size (pointers)
    elem_kind: str     # pointee kind (pointers)
    text: str = ""
    base: str = ""

    def describe(self) -> str:
        return self.text or self.name or "?"


def merge_params(text_params: list, described: list[dict] | None) -> list[ParamInfo]:
    """Parameter info from the source text, corrected by what the compiler says (CPU builds)."""
    out = []
    for i, tp in enumerate(text_params):
        d = described[i] if described and i < len(described) else None
        if d is not None:
            out.append(ParamInfo(name=tp.name, is_ptr=bool(d["ptr"]), is_const=bool(d["const"]), size=d["size"],
                                 kind=d["kind"], elem_size=d["elem_size"], elem_kind=d["elem_kind"], text=tp.text,
                                 base=tp.base))
        else:
            out.append(ParamInfo(name=tp.name, is_ptr=tp.is_ptr, is_const=tp.is_const,
                                 size=8 if tp.is_ptr else tp.size, kind="p" if tp.is_ptr else tp.kind,
                                 elem_size=tp.elem_size, elem_kind=tp.kind, text=tp.text, base=tp.base))
    if described and len(described) > len(text_params):
        for d in described[len(text_params):]:
            out.append(ParamInfo(name="", is_ptr=bool(d["ptr"]), is_const=bool(d["const"]), size=d["size"],
                                 kind=d["kind"], elem_size=d["elem_size"], elem_kind=d["elem_kind"]))
    return out


def is_torch(v: Any) -> bool:
    return type(v).__module__.startswith("torch") and hasattr(v, "data_ptr")


def is_cupy(v: Any) -> bool:
    return type(v).__module__.startswith("cupy") and hasattr(v, "data")


_FLOAT_DT = {2: np.float16, 4: np.float32, 8: np.float64}


def scalar_dtype(kind: str, size: int) -> Any:  # a numpy scalar type, or None
    if kind == "f":
        return _FLOAT_DT.get(size)
    if kind == "h":
        return np.float16
    if kind == "i":
        return {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}.get(size)
    if kind == "u":
        return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(size)
    if kind == "b":
        return np.bool_
    return None


def _bf16_bits(x: float) -> int:
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return (u >> 16) | 0x40
    u += 0x7FFF + ((u >> 16) & 1)
    return (u >> 16) & 0xFFFF


def pack_scalar(v: Any, p: ParamInfo, index: int, kname: str) -> bytes:
    where = f"argument {index} (`{p.describe()}`) of kernel `{kname}`"
    if is_torch(v):
        if v.numel() != 1:
            raise CudaArgumentError(f"{where} is a scalar parameter but got a tensor of shape {tuple(v.shape)}")
        v = v.item()
    if isinstance(v, np.ndarray):
        if v.ndim != 0:
            raise CudaArgumentError(f"{where} is a scalar parameter but got an array of shape {v.shape}")
        v = v[()]
    if v is None:
        raise CudaArgumentError(f"{where} is a scalar parameter but got None")
    if isinstance(v, (bytes, bytearray)):
        if len(v) != p.size:
            raise CudaArgumentError(f"{where} needs {p.size} bytes, got {len(v)}")
        return bytes(v)
    if p.kind == "B":
        return struct.pack("<H", _bf16_bits(float(v)))
    dt = scalar_dtype(p.kind, p.size)
    if dt is None:
        # a vector type passed by value (float2, int4, ...): a tuple of its components
        if isinstance(v, (tuple, list)) and p.size and p.base:
            from .source import _VECTORS
            vec = _VECTORS.get(p.base)
            if vec:
                edt = scalar_dtype(vec[0] if vec[0] != "h" else "h", vec[1])
                data = np.asarray(v, dtype=edt).tobytes()
                if len(data) <= p.size:
                    return data + b"\0" * (p.size - len(data))
        raise CudaArgumentError(f"{where} has a type the runtime cannot pack from {type(v).__name__} "
                                f"(pass raw bytes of length {p.size})")
    if p.kind in "iu":
        if isinstance(v, (float, np.floating)) and not float(v).is_integer():
            raise CudaArgumentError(f"{where} is an integer parameter but got {v!r}")
        if isinstance(v, (np.bool_, bool)):
            v = int(v)
        iv = int(v)
        info = np.iinfo(dt)
        if not info.min <= iv <= info.max:
            raise CudaArgumentError(f"{where} = {iv} does not fit in {np.dtype(dt).name}")
        return np.array(iv, dtype=dt).tobytes()
    if p.kind == "b":
        return np.array(bool(v), dtype=np.bool_).tobytes()
    if isinstance(v, complex):
        raise CudaArgumentError(f"{where} is real but got {v!r}")
    return np.array(float(v), dtype=dt).tobytes()


def scalar_value(v: Any, p: ParamInfo, index: int, kname: str) -> Any:
    """The numpy scalar a GPU launch passes (CuPy packs by the numpy type)."""
    raw = pack_scalar(v, p, index, kname)
    if p.kind == "B":
        return np.frombuffer(raw, dtype=np.uint16)[0]
    dt = scalar_dtype(p.kind, p.size)
    if dt is None:
        return np.frombuffer(raw, dtype=np.uint8)
    return np.frombuffer(raw, dtype=dt)[0]


def check_pointer_dtype(dtype: np.dtype, p: ParamInfo, index: int, kname: str, *, torch_dtype: Any = None) -> None:
    ek, es = p.elem_kind, p.elem_size
    name = str(torch_dtype) if torch_dtype is not None else np.dtype(dtype).name
    if ek in ("o", "p") or es == 0:
        return
    dk = np.dtype(dtype).kind
    isz = np.dtype(dtype).itemsize
    ok = False
    if ek == "f":
        ok = dk == "f" and isz == es
    elif ek == "h":
        ok = (dk == "f" and isz == 2) or (dk in "iu" and isz == 2)
    elif ek == "B":
        ok = (torch_dtype is not None and "bfloat16" in str(torch_dtype)) or (dk in "iu" and isz == 2)
    elif ek in ("i", "u"):
        ok = dk in "iu" and isz == es
    elif ek == "b":
        ok = isz == 1 and dk in "biu"
    if not ok:
        want = {"f": f"float{8 * es}", "h": "float16", "B": "bfloat16", "i": f"int{8 * es}",
                "u": f"uint{8 * es}", "b": "bool"}.get(ek, "?")
        raise CudaArgumentError(f"argument {index} (`{p.describe()}`) of kernel `{kname}` points to {want} "
                                f"elements but got an array of {name}")


@dataclass
class HostBuffer:
    array: np.ndarray                  # C-contiguous, what the kernel reads and writes
    writeback: Callable[[], None] | None
    elem: int


def host_buffer(v: Any, p: ParamInfo, index: int, kname: str) -> HostBuffer:
    """A contiguous numpy view/copy of an array argument, and how to copy results back."""
    if is_torch(v):
        import torch

        t = v.detach()
        tdtype = t.dtype
        check_pointer_dtype(_torch_np_dtype(t), p, index, kname, torch_dtype=tdtype)
        if t.is_cuda or not t.is_contiguous() or t.dtype == torch.bfloat16 or t.is_conj() or t.is_neg():
            host = t.contiguous().cpu()
            if host.dtype == torch.bfloat16:
                host = host.view(torch.int16)
            arr = host.numpy()
            if not arr.flags.writeable:
                arr = arr.copy()

            def wb(t=v, arr=arr, dtype=tdtype):
                src = torch.from_numpy(arr)
                if dtype == torch.bfloat16:
                    src = src.view(torch.bfloat16)
                with torch.no_grad():
                    t.copy_(src.to(t.device).view(t.shape))
            return HostBuffer(arr, wb, t.element_size())
        arr = t.numpy()
        return HostBuffer(arr, None, t.element_size())
    if is_cupy(v):
        arr = v.get()

        def wb(v=v, arr=arr):
            v.set(arr)
        check_pointer_dtype(arr.dtype, p, index, kname)
        return HostBuffer(np.ascontiguousarray(arr), wb, arr.dtype.itemsize)
    if isinstance(v, np.ndarray):
        check_pointer_dtype(v.dtype, p, index, kname)
        if v.flags.c_contiguous and (v.flags.writeable or p.is_const):
            return HostBuffer(v, None, v.dtype.itemsize)
        arr = np.ascontiguousarray(v)

        def wb(v=v, arr=arr):
            if v.flags.writeable:
                v[...] = arr
        return HostBuffer(arr, wb, v.dtype.itemsize)
    if isinstance(v, (bytearray, memoryview)):
        arr = np.frombuffer(v, dtype=np.uint8)
        return HostBuffer(arr, None, 1)
    raise CudaArgumentError(f"argument {index} (`{p.describe()}`) of kernel `{kname}` is a pointer: pass a numpy "
                            f"array, a torch tensor or None, not {type(v).__name__}")


def _torch_np_dtype(t) -> np.dtype:
    import torch

    if t.dtype == torch.bfloat16:
        return np.dtype(np.int16)
    return np.dtype(str(t.dtype).replace("torch.", "")) if t.dtype != torch.bool else np.dtype(np.bool_)


def dim3(v: Any, what: str) -> tuple[int, int, int]:
    if hasattr(v, "x") and hasattr(v, "y"):
        v = (v.x, v.y, getattr(v, "z", 1))
    if isinstance(v, (int, np.integer)):
        t = (int(v), 1, 1)
    elif isinstance(v, (tuple, list)) and 1 <= len(v) <= 3 and all(isinstance(i, (int, np.integer)) for i in v):
        t = tuple(int(i) for i in v) + (1,) * (3 - len(v))
    else:
        raise CudaArgumentError(f"{what} must be an int or a tuple of 1 to 3 ints, not {v!r}")
    if any(i <= 0 for i in t):
        raise CudaLaunchError(f"{what} {t} has a dimension <= 0 (CUDA: invalid configuration argument)", kind="launch")
    return t  # type: ignore[return-value]


def launch_config(cfg: Any) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
    """`[grid, block]` or `[grid, block, shared_bytes]` (a 4th item, a stream, is ignored)."""
    if not isinstance(cfg, tuple) or not 2 <= len(cfg) <= 4:
        raise CudaArgumentError("launch with kernel[grid, block] or kernel[grid, block, shared_bytes]")
    grid, block = dim3(cfg[0], "grid"), dim3(cfg[1], "block")
    smem = int(cfg[2]) if len(cfg) >= 3 and cfg[2] is not None else 0
    if smem < 0:
        raise CudaLaunchError("shared_bytes must be >= 0", kind="launch")
    return grid, block, smem
