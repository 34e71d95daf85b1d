"""An O_DIRECT file reader: page-aligned buffers, a bounce buffer for misaligned requests, k reads in flight.

This is the host-side data path that GPUDirect Storage (cuFile) replaces: storage DMAs straight into the
destination buffer, bypassing the page cache. With O_DIRECT the kernel refuses (EINVAL) any read whose buffer
address, file offset or length is not a multiple of the device's logical block size; ALIGN = 4096 is a multiple
of every logical block size in use (512 B and 4 KiB), so aligning to it is always enough.

Contract:
    buf = aligned_buffer(nbytes)       # writable memoryview, address % ALIGN == 0, len == round_up(nbytes, ALIGN)
    fd, direct = open_direct(path)     # O_RDONLY | O_DIRECT; a filesystem that refuses O_DIRECT (EINVAL at open)
                                       #   gets a plain buffered fd and direct=False ("compatibility mode")
    n = read_into(fd, direct, dest, offset)   # file bytes [offset, offset + len(dest)) into dest, any alignment;
                                               #   returns the bytes copied (fewer at end of file)
    data = read_file(path, chunk, inflight)   # the whole file, read in `chunk`-byte pieces, exactly
                                               #   min(inflight, chunks not yet read) preadv calls in flight (a new
                                               #   read starts as soon as one ends, never more than `inflight`);
                                               #   returns a writable view of exactly the size

Rules the tests check: every read goes through os.preadv; every preadv on an O_DIRECT fd has an aligned buffer
address, offset and length (never rely on EINVAL: tmpfs accepts misaligned O_DIRECT reads silently); a request
that is aligned is read straight into `dest`; read_file's reads land in the buffer it returns (no extra copy).

    python direct_reader.py FILE       # throughput of buffered vs O_DIRECT reads (k = 1, 4, 16 in flight)
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ALIGN = 4096


def round_up(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def round_down(n: int, a: int = ALIGN) -> int:
    return n // a * a


def address_of(buf) -> int:
    """Address of the first byte of a writable buffer (memoryview, mmap, bytearray, numpy array)."""
    mv = memoryview(buf).cast("B")
    return ctypes.addressof((ctypes.c_char * len(mv)).from_buffer(mv))


def aligned_buffer(nbytes: int) -> memoryview:
    """A writable buffer of round_up(nbytes) bytes starting at an ALIGN-aligned address (empty for 0)."""
    ### HINT: anonymous mmap memory is page-aligned; mmap of 0 bytes is an error
    ### BEGIN SOLUTION
    if nbytes <= 0:
        return memoryview(bytearray(0))
    return memoryview(mmap.mmap(-1, round_up(nbytes)))
    ### END SOLUTION


def open_direct(path: str | os.PathLike) -> tuple[int, bool]:
    """Open `path` read-only with O_DIRECT: (fd, True); if the filesystem refuses O_DIRECT, (buffered fd, False)."""
    ### HINT: only EINVAL means "no O_DIRECT here"; every other error (ENOENT, EACCES) is the caller's
    ### BEGIN SOLUTION
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECT), True
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    return os.open(path, os.O_RDONLY), False
    ### END SOLUTION


def read_into(fd: int, direct: bool, dest, offset: int) -> int:
    """Read file bytes [offset, offset + len(dest)) into `dest`; returns how many were copied (fewer at EOF).

    Aligned requests (or any request on a buffered fd) go straight into `dest` with one os.preadv. Otherwise
    the aligned range that covers the request is read into a bounce buffer and the requested bytes copied out."""
    dest = memoryview(dest).cast("B")
    n = len(dest)
    if n == 0:
        return 0
    ### HINT: the bounce range is [round_down(offset), round_up(offset + n)); at EOF preadv returns fewer bytes, copy only those
    ### BEGIN SOLUTION
    if not direct or (address_of(dest) % ALIGN == 0 and offset % ALIGN == 0 and n % ALIGN == 0):
        return os.preadv(fd, [dest], offset)
    lo, hi = round_down(offset), round_up(offset + n)
    bounce = aligned_buffer(hi - lo)
    got = os.preadv(fd, [bounce], lo)
    skip = offset - lo  # the requested bytes start this far into the bounce buffer
    k = max(0, min(n, got - skip))
    dest[:k] = bounce[skip:skip + k]
    return k
    ### END SOLUTION


def read_file(path: str | os.PathLike, chunk: int = 1 << 20, inflight: int = 4) -> memoryview:
    """The whole file as a writable view of exactly its size; min(inflight, chunks left) reads of `chunk` bytes in flight."""
    if chunk <= 0 or chunk % ALIGN or inflight < 1:
        raise ValueError(f"chunk must be a positive multiple of {ALIGN} and inflight >= 1")
    fd, direct = open_direct(path)
    try:
        size = os.fstat(fd).st_size
        ### HINT: one aligned output buffer; chunk i is its slice [i*chunk, ...), the last one rounded up to ALIGN so the read stays aligned
        ### BEGIN SOLUTION
        out = aligned_buffer(size)

        def one(off: int) -> int:
            return read_into(fd, direct, out[off:min(off + chunk, len(out))], off)

        with ThreadPoolExecutor(max_workers=inflight) as pool:
            got = sum(pool.map(one, range(0, size, chunk)))
        if got != size:
            raise OSError(errno.EIO, f"read {got} of {size} bytes of {path}")
        return out[:size]
        ### END SOLUTION
    finally:
        os.close(fd)


def benchmark(path: str, repeat: int = 3) -> dict[str, float]:
    """MB/s of a buffered read (page cache, usually warm) and of read_file with k = 1, 4, 16 reads in flight."""
    size = os.path.getsize(path)
    best: dict[str, float] = {}

    def timed(name, fn):
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            best[name] = max(best.get(name, 0.0), size / 1e6 / max(time.perf_counter() - t, 1e-9))

    def buffered():
        with open(path, "rb", buffering=0) as f:
            f.readall()

    timed("buffered", buffered)
    for k in (1, 4, 16):
        timed(f"O_DIRECT k={k}", lambda k=k: read_file(path, 1 << 20, k))
    return best


if __name__ == "__main__":
    for name, mbs in benchmark(sys.argv[1]).items():
        print(f"{name:>14}: {mbs:9.1f} MB/s")
