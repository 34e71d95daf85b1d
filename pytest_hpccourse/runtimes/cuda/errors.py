"""Exceptions of the CUDA runtimes. Every one carries `file`/`line` (the learner's source line,
when known), `kernel`, `block`, `thread` and `kind` (a short machine-readable tag), so a test
can assert on them:

    with pytest.raises(cuda.CudaRaceError) as e:
        cuda.check(...)
    assert e.value.line == 17
"""

from __future__ import annotations


class CudaError(Exception):
    """Base class of everything the CUDA runtimes raise about a kernel or its source."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None, kind: str = "",
                 kernel: str | None = None, block: tuple | None = None, thread: tuple | None = None,
                 details: list[str] | None = None, log: str = "", variant: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.kind = kind
        self.kernel = kernel
        self.block = tuple(block) if block is not None else None
        self.thread = tuple(thread) if thread is not None else None
        self.details = list(details or [])
        self.log = log
        self.variant = variant

    @property
    def location(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or ""

    def __str__(self) -> str:
        text = self.message
        if self.variant:
            text = f"[{self.variant}] {text}"
        extra = [d for d in self.details[1:]]
        if extra:
            text += "\n" + "\n".join("  also: " + d for d in extra)
        return text


class CudaCompileError(CudaError):
    """The source does not compile (g++ for the emulator, nvcc's check, or NVRTC on a GPU)."""


class CudaUnsupportedError(CudaError):
    """The source uses a feature the CPU emulator rejects (inline asm, mma.sync, cp.async,
    cooperative groups, textures, ...); raised at build time, naming the line."""


class CudaLaunchError(CudaError):
    """A launch the hardware would refuse (bad grid/block, too much shared memory, bad arguments)."""


class CudaRaceError(CudaError):
    """A data race: conflicting shared-memory accesses in one barrier interval, conflicting
    non-atomic global writes, or results that depend on the order threads run in."""


class CudaUninitializedError(CudaRaceError):
    """A read of shared memory that no thread of the block has written."""


class CudaOrderDependenceError(CudaRaceError):
    """The kernel's results differ between thread/block orders (a race the checks did not pin down)."""


class CudaOutOfBoundsError(CudaError):
    """An access outside an argument buffer or a shared-memory variable, or an illegal address."""


class CudaMisalignedError(CudaOutOfBoundsError):
    """An access at an address that is not a multiple of its type's alignment (a `float4` load from an
    address that is not 16-byte aligned, a `float2` at a non-8 address, a WMMA load/store whose pointer is
    not 32-byte aligned or whose ldm is not a multiple of 16 bytes): a GPU stops the kernel with
    "misaligned address" (cudaErrorMisalignedAddress)."""


class CudaDeadlockError(CudaError):
    """Threads wait at a barrier or warp intrinsic that can never complete."""


class CudaTimeoutError(CudaDeadlockError):
    """The kernel ran past its time limit (an infinite loop, or a spin-wait the emulator never satisfies)."""


class CudaCrashError(CudaError):
    """The kernel's process died some other way (assert, __trap, arithmetic exception, out of memory)."""


KIND_TO_ERROR: dict[str, type[CudaError]] = {
    "race": CudaRaceError,
    "global-race": CudaRaceError,
    "uninit": CudaUninitializedError,
    "order": CudaOrderDependenceError,
    "smem-oob": CudaOutOfBoundsError,
    "gmem-oob": CudaOutOfBoundsError,
    "asan": CudaOutOfBoundsError,
    "segv": CudaOutOfBoundsError,
    "misaligned": CudaMisalignedError,
    "deadlock": CudaDeadlockError,
    "warp": CudaDeadlockError,
    "timeout": CudaTimeoutError,
    "trap": CudaCrashError,
    "abort": CudaCrashError,
    "fpe": CudaCrashError,
    "oom": CudaCrashError,
    "crash": CudaCrashError,
    "launch": CudaLaunchError,
}
