"""Tests for runtime-10: the learner's O_DIRECT reader.

Oracle: the same bytes read back through a plain buffered `open(...).read()`. Every os.preadv call is watched
(a spy wraps os.preadv): on an O_DIRECT fd its buffer address, offset and length must be multiples of 4096
whatever the filesystem does with a misaligned request (ext4/XFS: EINVAL; tmpfs since Linux 6.6: silently
served from the page cache), the reads must go where the contract says (straight into `dest`, into the buffer
read_file returns) and exactly min(inflight, chunks not yet read) of them must be in flight.

The files live in a directory whose filesystem supports O_DIRECT (pytest's tmp_path, else a scratch folder
inside the lesson); when neither does, the tests that need O_DIRECT are skipped with a NEEDS message.
"""

import errno
import fcntl
import os
import random
import shutil
import threading
import time

import pytest

ALIGN = 4096
KiB, MiB = 1 << 10, 1 << 20
ODD_SIZES = [0, 1, 511, 512, 4095, 4096, 4097, 8191, 12411, 65537, 3 * MiB + 123, 5 * MiB]


@pytest.fixture
def dr(lesson):
    return lesson.load("direct_reader.py")


def probe(folder):
    """(supports O_DIRECT, enforces alignment) for the filesystem of `folder`."""
    p = os.path.join(folder, ".o_direct_probe")
    with open(p, "wb") as f:
        f.write(b"x" * 8192)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        os.remove(p)
        if e.errno == errno.EINVAL:
            return False, False
        raise
    import mmap

    buf = memoryview(mmap.mmap(-1, 8192))
    try:
        os.preadv(fd, [buf[1:4097]], 0)
        enforced = False
    except OSError as e:
        enforced = e.errno == errno.EINVAL
    finally:
        os.close(fd)
        os.remove(p)
    return True, enforced


@pytest.fixture
def dio_dir(tmp_path, lesson):
    """A directory on a filesystem with O_DIRECT support: (path, alignment enforced by the kernel)."""
    scratch = lesson.dir / ".dio-scratch"
    for folder in (tmp_path, scratch):
        folder.mkdir(exist_ok=True)
        ok, enforced = probe(folder)
        if ok:
            yield folder, enforced
            if folder == scratch:
                shutil.rmtree(scratch, ignore_errors=True)
            return
    shutil.rmtree(scratch, ignore_errors=True)
    pytest.skip("NEEDS a filesystem that supports O_DIRECT (tmp and the lesson folder are on one that refuses it)")


def make_file(folder, size, rng, name=None):
    p = folder / (name or f"f{size}.bin")
    p.write_bytes(rng.randbytes(size))
    return p


def buffered(p):
    with open(p, "rb") as f:
        return f.read()


class PreadvSpy:
    """Wraps os.preadv: records calls, checks O_DIRECT alignment, counts reads in flight."""

    def __init__(self, dr, delay=0.0):
        self.dr, self.delay, self.real = dr, delay, os.preadv  # delay: seconds, or a function of the offset
        self.calls, self.violations, self.finished = [], [], []
        self.lock, self.active, self.max_active = threading.Lock(), 0, 0

    def __call__(self, fd, buffers, offset, *args):
        direct = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)
        spans = [(self.dr.address_of(b), memoryview(b).nbytes) for b in buffers]
        with self.lock:
            self.calls.append((direct, spans, offset))
            for addr, length in spans:
                if direct and (addr % ALIGN or offset % ALIGN or length % ALIGN):
                    self.violations.append(f"preadv(O_DIRECT fd, buffer at {addr:#x} (addr % 4096 = {addr % ALIGN}), "
                                           f"length {length}, offset {offset})")
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            delay = self.delay(offset) if callable(self.delay) else self.delay  # a function may also block
            if delay:
                time.sleep(delay)
            return self.real(fd, buffers, offset, *args)
        finally:
            with self.lock:
                self.active -= 1
                self.finished.append(offset)

    def check_aligned(self, what):
        assert not self.violations, (f"{what}: misaligned read on an O_DIRECT fd (ext4/XFS answer EINVAL): "
                                     f"{self.violations[0]} (+{len(self.violations) - 1} more)")


@pytest.fixture
def spy(dr, monkeypatch):
    s = PreadvSpy(dr)
    monkeypatch.setattr(os, "preadv", s)
    return s


@pytest.mark.points(0.5)
def test_aligned_buffer(dr):
    for n in [0, 1, 511, 4095, 4096, 4097, 65536, 3 * MiB + 5]:
        b = dr.aligned_buffer(n)
        mv = memoryview(b)
        assert not mv.readonly, f"aligned_buffer({n}) must be writable"
        assert mv.nbytes == -(-n // ALIGN) * ALIGN, f"aligned_buffer({n}) has {mv.nbytes} bytes"
        if n:
            assert dr.address_of(b) % ALIGN == 0, f"aligned_buffer({n}) starts at {dr.address_of(b):#x}"
            mv.cast("B")[-1] = 7  # every byte is writable


@pytest.mark.points(0.5)
def test_compat_mode_when_o_direct_is_refused(dr, tmp_path, monkeypatch):
    """A filesystem without O_DIRECT (tmpfs before Linux 6.6) answers EINVAL at open: fall back, like cuFile's
    compatibility mode; other errors are not swallowed."""
    rng = random.Random(1014)
    p = make_file(tmp_path, 70001, rng)
    real_open = os.open

    def refusing_open(path, flags, *args, **kw):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", refusing_open)
    fd, direct = dr.open_direct(p)
    try:
        assert direct is False, "open_direct must report direct=False after falling back"
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT
        dest = bytearray(1000)
        spy = PreadvSpy(dr)
        monkeypatch.setattr(os, "preadv", spy)
        assert dr.read_into(fd, direct, memoryview(dest)[1:], 3) == 999 and bytes(dest[1:]) == buffered(p)[3:1002]
        assert [span for _, spans, _ in spy.calls for span in spans] == [(dr.address_of(dest) + 1, 999)], (
            "on a buffered fd (compatibility mode) any request is one preadv straight into dest: the page cache "
            "has no alignment rule, a bounce buffer there is only an extra copy")
    finally:
        os.close(fd)
    assert bytes(dr.read_file(p, 8 * KiB, 3)) == buffered(p)
    with pytest.raises(FileNotFoundError):
        dr.open_direct(tmp_path / "missing.bin")

    def eacces_open(path, flags, *args, **kw):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(os, "open", eacces_open)
    with pytest.raises(PermissionError):
        dr.open_direct(p)


@pytest.mark.points(1)
def test_read_file_exact_bytes_odd_sizes(dr, dio_dir, spy):
    folder, _ = dio_dir
    rng = random.Random(1010)
    for size in ODD_SIZES:
        p = make_file(folder, size, rng)
        want = buffered(p)
        for chunk, inflight in [(ALIGN, 3), (64 * KiB, 1), (MiB, 4), (256 * KiB, 8)]:
            spy.calls.clear()
            got = dr.read_file(p, chunk, inflight)
            assert bytes(got) == want, f"read_file of a {size}-byte file (chunk {chunk}, inflight {inflight}) differs"
            assert not memoryview(got).readonly, "read_file must return a writable view"
            if size:
                assert spy.calls and all(c[0] for c in spy.calls), (
                    f"{size}-byte file: the reads must use os.preadv on an O_DIRECT fd (open_direct)")
    spy.check_aligned("read_file")


@pytest.mark.points(0.5)
def test_read_file_is_zero_copy(dr, dio_dir, spy):
    """The direct reads land in the buffer read_file returns: one preadv per chunk, no bounce, no join."""
    folder, _ = dio_dir
    rng = random.Random(1011)
    for size, chunk in [(4097, ALIGN), (3 * MiB + 123, MiB), (12411, 8 * KiB)]:
        p = make_file(folder, size, rng)
        spy.calls.clear()
        got = dr.read_file(p, chunk, 4)
        base, end = dr.address_of(got), dr.address_of(got) + -(-size // ALIGN) * ALIGN
        n_chunks = -(-size // chunk)
        assert len(spy.calls) == n_chunks, f"{size} B in {chunk} B chunks: {len(spy.calls)} preadv calls, want {n_chunks}"
        for _, spans, offset in spy.calls:
            for addr, length in spans:
                assert base <= addr and addr + length <= end and addr - base == offset, (
                    f"{size} B file: a read at file offset {offset} went to {addr - base:+d} B from the returned buffer; "
                    "each chunk must be read straight into its place in the result")
    spy.check_aligned("read_file")


@pytest.mark.points(1)
def test_read_into_any_alignment_via_bounce(dr, dio_dir, spy):
    folder, enforced = dio_dir
    rng = random.Random(1012)
    files = [make_file(folder, size, rng) for size in (4097, 12411, 65537, 300 * KiB + 7)]
    fd_cases = 0
    for p in files:
        data = buffered(p)
        size = len(data)
        fd, direct = dr.open_direct(p)
        try:
            assert direct, f"open_direct({p.name}) fell back to buffered I/O on a filesystem that supports O_DIRECT"
            cases = [(0, ALIGN, 0), (ALIGN, 2 * ALIGN, 0), (1, 100, 0), (4095, 2, 0), (0, ALIGN, 1), (0, ALIGN, 512),
                     (size - 5, 100, 0), (size - 1, 1, 3), (size + 10, 50, 0), (round_down(size), 2 * ALIGN, 0),
                     (0, 100, 0), (2 * ALIGN, ALIGN + 1, 0), (round_down(size), 7, 0)]
            cases += [(rng.choice([rng.randrange(0, size + 100), round_down(rng.randrange(0, size))]),
                       rng.choice([rng.randrange(1, 3 * ALIGN), ALIGN * rng.randrange(1, 4)]), rng.choice([0, 0, 1, 8, 512, 2048]))
                      for _ in range(37)]
            for offset, length, shift in cases:
                backing = dr.aligned_buffer(length + shift + ALIGN)
                mv = memoryview(backing).cast("B")
                mv[:] = b"\xa5" * len(mv)  # poison: the bytes around dest must stay untouched
                dest = mv[shift:shift + length]
                spy.calls.clear()
                n = dr.read_into(fd, direct, dest, offset)
                want = data[offset:offset + length]
                assert n == len(want), f"{p.name}: read_into(offset={offset}, len={length}, buf+{shift}) = {n}, want {len(want)}"
                assert bytes(dest[:n]) == want, f"{p.name}: read_into(offset={offset}, len={length}, buf+{shift}) bytes differ"
                # dest[n:] is unspecified (an O_DIRECT read at EOF transfers whole blocks: zeros past EOF), around it not
                assert bytes(mv[:shift]) + bytes(mv[shift + length:]) == b"\xa5" * (len(mv) - length), (
                    f"{p.name}: read_into(offset={offset}, len={length}, buf+{shift}) wrote outside dest")
                aligned = shift == 0 and offset % ALIGN == 0 and length % ALIGN == 0
                if aligned:
                    assert [s for _, spans, _ in spy.calls for s in spans] == [(dr.address_of(dest), length)], (
                        f"{p.name}: an aligned request (offset {offset}, {length} B) must be one preadv straight into dest")
                fd_cases += 1
        finally:
            os.close(fd)
    spy.check_aligned("read_into")
    assert fd_cases == 200


def round_down(n):
    return n // ALIGN * ALIGN


@pytest.mark.points(1)
def test_reads_overlap_k_in_flight(dr, dio_dir, monkeypatch):
    folder, _ = dio_dir
    rng = random.Random(1013)
    p = make_file(folder, 12 * 64 * KiB - 100, rng)  # 12 chunks of 64 KiB, the last one short
    want = buffered(p)
    for k in (1, 2, 5, 16):
        s = PreadvSpy(dr, delay=0.04)
        monkeypatch.setattr(os, "preadv", s)
        got = dr.read_file(p, 64 * KiB, k)
        assert bytes(got) == want
        assert len(s.calls) == 12, f"inflight={k}: {len(s.calls)} preadv calls for 12 chunks"
        assert s.max_active <= k, f"inflight={k}: {s.max_active} reads were in flight at once"
        assert s.max_active == min(k, 12), (
            f"inflight={k}: at most {s.max_active} reads overlapped; the reads must be issued concurrently "
            f"(a pool of {k} workers keeps {min(k, 12)} in flight)")
        s.check_aligned(f"read_file(inflight={k})")
    # the queue is kept full: when a read finishes the next chunk starts at once, it does not wait for the rest of
    # a "batch". The read of chunk 0 is held until the 11 other chunks are read (by the two other workers), at
    # most 5 s: reads issued in batches of `inflight` never start them while chunk 0 is in flight.
    def hold_chunk_0(offset):
        deadline = time.monotonic() + 5.0
        while offset == 0 and time.monotonic() < deadline:
            with s.lock:
                if len(s.finished) >= 11:
                    return 0.0
            time.sleep(0.002)
        return 0.0

    s = PreadvSpy(dr, delay=hold_chunk_0)
    monkeypatch.setattr(os, "preadv", s)
    got = dr.read_file(p, 64 * KiB, 3)
    assert bytes(got) == want
    before_slow = s.finished[:s.finished.index(0)] if 0 in s.finished else s.finished
    assert len(before_slow) == 11, (
        f"inflight=3, the read of chunk 0 is held: only {len(before_slow)} of the 11 other chunks were read "
        "while it was in flight (5 s); a new read must start as soon as one finishes (reads issued in batches of "
        "`inflight` that wait for the whole batch leave the queue draining)")


@pytest.mark.points(0.5)
def test_kernel_answers_einval_and_throughput(dr, dio_dir, capsys):
    """Where the kernel enforces O_DIRECT alignment, a misaligned read through the learner's open_direct fd fails
    with EINVAL (the rule read_into works around); then throughput of buffered vs O_DIRECT reads is reported."""
    folder, enforced = dio_dir
    rng = random.Random(1015)
    p = make_file(folder, 24 * MiB + 5, rng)
    fd, direct = dr.open_direct(p)
    try:
        assert direct
        buf = memoryview(dr.aligned_buffer(3 * ALIGN)).cast("B")
        if enforced:
            for what, b, off in [("buffer + 1", buf[1:ALIGN + 1], 0), ("offset 100", buf[:ALIGN], 100),
                                 ("length 100", buf[:100], 0)]:
                with pytest.raises(OSError) as e:
                    os.preadv(fd, [b], off)
                assert e.value.errno == errno.EINVAL, what
        assert os.preadv(fd, [buf[:ALIGN]], ALIGN) == ALIGN
    finally:
        os.close(fd)
    want = buffered(p)
    t = time.perf_counter()
    got = dr.read_file(p, MiB, 8)
    t_direct = time.perf_counter() - t
    assert bytes(got) == want
    t = time.perf_counter()
    buffered(p)
    t_buf = time.perf_counter() - t
    with capsys.disabled():
        print(f"\n[runtime-10] {len(want) / MiB:.0f} MiB on {folder}: buffered (page cache warm) "
              f"{len(want) / MiB / t_buf:.0f} MiB/s, O_DIRECT k=8 {len(want) / MiB / t_direct:.0f} MiB/s; "
              f"alignment enforced by the kernel: {enforced}")
    assert t_direct < 30, "24 MiB took more than 30 s"
