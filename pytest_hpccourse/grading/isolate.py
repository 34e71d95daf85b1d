"""Run a lesson's code tests in a forked child process, so that a crash costs that lesson, not the run.

Learner code that corrupts the interpreter (an unmasked `tl.store` under Triton's CPU interpreter writes
past a NumPy buffer and breaks the heap; `os._exit`; a C extension's abort) would otherwise kill pytest
before the course report, the JSON and the Classroom result are written.

How: the first isolated test of a lesson forks the pytest process. The child runs that test's setup,
call and teardown (pytest's own `call_and_report`, so fixtures, capture, markers and pytest-timeout work as
usual), sends each phase's `TestReport` back through a pipe, and waits for the next test of the same
lesson; the parent logs the reports, so every plugin (terminal, JUnit XML, xdist, the course's scores in
`user_properties`) sees ordinary reports. One child serves one lesson's consecutive tests (the Triton
interpreter's one-time start-up, seconds on a loaded 2-core machine, is paid once per lesson, not per
test). If the child dies, the test it was running gets a failed report naming the signal ("crashed: SIGSEGV
(signal 11)") with the Python stack faulthandler dumped, and the next test starts a fresh child from the
parent's clean state. Heap damage an earlier test of the same lesson did can surface in a later test of
that lesson; it never reaches another lesson or the parent.

Which tests are isolated (`--course-isolate`, ini `course_isolate`; the option wins over the ini, the
default is `auto`):
- `off`: none.
- `auto`: code tests of lessons that require `triton` while Triton runs through its CPU interpreter
  (`TRITON_INTERPRET=1`), the one configuration of this course where learner code does unchecked native
  writes inside the pytest process. CUDA C already runs in a process of its own (the emulator), and
  compiled Triton on a GPU reports a bad address as a CUDA error, not a host crash.
- `on`: every lesson code test that can be forked safely.
Never isolated, whatever the mode: lessons that require `ray` (the session's Ray cluster and its pooled
actors belong to the parent), and on a machine with a CUDA GPU every lesson that may use it (`torch`,
`cuda`, `cuda-gpu`, `triton`, `cute`): a CUDA context does not survive `fork`, and probing the GPU has
already initialised the driver in the parent. Nor under `--pdb`/`--trace` (a debugger needs the terminal).

Fork safety: PyTorch's OpenMP pool does not survive `fork` (the child would hang in its first parallel
region), so the child runs with `torch.set_num_threads(1)`. The child never tears down what it inherited:
its teardown stops at the parent's setup stack, and at its end it runs only the finalizers it added itself
(a module or session fixture an isolated test set up lives and dies in that lesson's child). pytest-timeout's
timer is armed in the child and suppressed in the parent; the parent also kills a child that outlives the
timeout by a grace period, so a hang in native code cannot hang the run. Warnings raised inside an
isolated test are not shown.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import pytest
from _pytest._code.code import ReprExceptionInfo, ReprFileLocation, ReprTracebackNative
from _pytest.runner import CallInfo, call_and_report

MODES = ("auto", "on", "off")
NEVER = frozenset({"ray"})
GPU_USERS = frozenset({"torch", "cuda", "cuda-gpu", "triton", "cute"})
CHILD_ERROR = 70  # exit status of a child whose own machinery failed (not the test)
MAX_TRACE_LINES = 40
CLOSE_WAIT = 10.0  # seconds a child may take to run its own finalizers and exit

LessonOf = Callable[[pytest.Item], "tuple[Hashable, list[str]] | None"]

_ISOLATED = pytest.StashKey[bool]()
_HEADER = struct.Struct("!Q")
_in_child = False


def wants_isolation(mode: str, requires: Iterable[str], *, interpreter: bool, gpu: Callable[[], bool]) -> bool:
    """Whether a code test of a lesson with these `requires` runs in a forked child (module docstring).

    `interpreter`: Triton runs through TRITON_INTERPRET=1. `gpu`: whether a CUDA GPU is visible; called
    only when the answer depends on it.
    """
    needs = set(requires)
    if mode == "off" or needs & NEVER:
        return False
    if mode == "auto" and not ("triton" in needs and interpreter):
        return False
    return not (needs & GPU_USERS and gpu())


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def crash_message(status: int | None, elapsed: float, timeout: float | None, killed: bool) -> str:
    """One line saying why the child stopped before the test's last report (`status` as from os.waitpid)."""
    if killed:
        return f"Timeout (>{timeout}s): the test did not stop and its process was killed"
    if status is None:
        return "crashed: the test process vanished"
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"crashed: {signal_name(-code)} (signal {-code})"
    if timeout and elapsed >= timeout:  # pytest-timeout's thread method ends the process with os._exit(1)
        return f"Timeout (>{timeout}s)"
    if code == CHILD_ERROR:
        return f"crashed: the isolated test process failed (exit status {code})"
    return f"crashed: the test process exited with status {code} before the test finished"


def _timeout_settings(item: pytest.Item) -> Any:
    """pytest-timeout's settings for `item` (None when pytest-timeout is not active, e.g. `-p no:timeout`)."""
    if not item.config.pluginmanager.hasplugin("timeout"):
        return None
    try:
        from pytest_timeout import _get_item_settings

        return _get_item_settings(item)
    except (ImportError, AttributeError):  # a pytest-timeout whose internals moved: no watchdog
        return None


def item_timeout(item: pytest.Item) -> float | None:
    """The test's pytest-timeout limit in seconds (None: no limit, or pytest-timeout inactive)."""
    settings = _timeout_settings(item)
    return float(settings.timeout) if settings is not None and settings.timeout else None


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without a CUDA module: nothing initialised
        return False


@dataclass
class _Child:
    """A forked process serving the isolated tests of one lesson."""

    pid: int
    lesson: Hashable
    inherited: list[Any]  # the parent's setup stack at the fork: the child never tears it down
    commands: int  # write end of the command pipe
    reports: int  # read end of the report pipe
    faults: IO[str]  # where the child's faulthandler writes
    buffer: bytearray = field(default_factory=bytearray)

    def continues_with(self, lesson: Hashable, nextitem: pytest.Item) -> bool:
        chain = nextitem.listchain()
        return lesson == self.lesson and chain[:len(self.inherited)] == self.inherited


class Isolation:
    """The hooks that run isolated tests in a lesson's child (registered by `register` unless off)."""

    def __init__(self, config: pytest.Config, mode: str, lesson_of: LessonOf,
                 missing: Callable[[list[str]], list[str]] | None = None) -> None:
        self.config = config
        self.mode = mode
        self.lesson_of = lesson_of
        self.missing = missing
        self.child: _Child | None = None
        self._index: dict[pytest.Item, int] = {}

    def isolates(self, item: pytest.Item) -> bool:
        known = item.stash.get(_ISOLATED, None)
        if known is None:
            known = self._decide(item)
            item.stash[_ISOLATED] = known
        return known

    def _decide(self, item: pytest.Item) -> bool:
        from . import capabilities

        if _in_child or not hasattr(os, "fork"):
            return False
        found = self.lesson_of(item)
        if found is None or (self.missing or capabilities.missing)(found[1]):
            return False  # not a lesson code test, or it is skipped as NEEDS anyway
        return wants_isolation(self.mode, found[1], interpreter=os.environ.get("TRITON_INTERPRET") == "1",
                               gpu=lambda: capabilities.has_torch_cuda() or capabilities.has_cuda_gpu())

    # ---- hooks ---------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if _in_child or not self.isolates(item) or _cuda_initialised():
            self._close()  # a test the parent runs itself: the child's inherited stack may change under it
            return None
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in self._run(item, nextitem):
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    # pytest-timeout: the parent must not arm SIGALRM around a test its child runs; the child arms it.
    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool | None:
        return None if _in_child or not self.isolates(item) or _cuda_initialised() else True

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> bool | None:
        return None if _in_child or not self.isolates(item) or _cuda_initialised() else True

    def pytest_sessionfinish(self) -> None:
        self._close()

    # ---- parent --------------------------------------------------------------------------------
    def _run(self, item: pytest.Item, nextitem: pytest.Item | None) -> list[pytest.TestReport]:
        found = self.lesson_of(item)
        lesson = found[0] if found else None
        if self.child is not None and self.child.lesson != lesson:
            self._close()
        if self.child is None:
            self.child = self._fork(lesson, item.session)
        child = self.child
        keep = nextitem is not None and self.isolates(nextitem) and child.continues_with(
            (self.lesson_of(nextitem) or (None,))[0], nextitem)
        timeout = item_timeout(item)
        started, wall = time.monotonic(), time.time()
        # The item's user_properties as the parent has them now (the score properties were added after the fork).
        command = pickle.dumps((self._index_of(item), self._index_of(nextitem) if keep else -1,
                                [(name, value) for name, value in item.user_properties if _picklable(value)]))
        try:
            _write_all(child.commands, _HEADER.pack(len(command)) + command)
        except OSError:
            pass  # it died after its last test: read below finds no report and says so
        deadline = started + timeout + min(10.0, max(2.0, 0.25 * timeout)) if timeout else None
        try:
            messages, status, killed = _receive(child, item.nodeid, deadline)
        except BaseException:
            self._kill()
            raise
        config = item.config
        reports = [config.hook.pytest_report_from_serializable(config=config, data=m) for m in messages]
        if not reports or reports[-1].when != "teardown":
            if status is None and not killed:
                _kill(child.pid)
            child.faults.seek(0)
            reports += _crash_reports(item, reports, crash_message(status, time.monotonic() - started, timeout,
                                                                   killed), child.faults.read(), wall)
            self._forget()
        elif not keep:
            self._close()
        reports[-1] = _parent_teardown(item, nextitem, reports[-1])
        return reports

    def _index_of(self, item: pytest.Item) -> int:
        if item not in self._index:
            self._index = {it: i for i, it in enumerate(item.session.items)}
        return self._index[item]

    def _fork(self, lesson: Hashable, session: pytest.Session) -> _Child:
        command_r, command_w = os.pipe()
        report_r, report_w = os.pipe()
        faults = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in _forget
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # else the child may flush the parent's buffered text a second time
        inherited = list(session._setupstate.stack)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            os.close(command_w)
            os.close(report_r)
            _serve(session, command_r, report_w, faults, inherited)
        os.close(command_r)
        os.close(report_w)
        return _Child(pid, lesson, inherited, command_w, report_r, faults)

    def _close(self) -> None:
        """Let the child tear down what it set up and exit (killed if it takes longer than CLOSE_WAIT)."""
        child = self.child
        if child is None:
            return
        with contextlib.suppress(OSError):
            os.close(child.commands)  # EOF: the child's signal to finish
        deadline = time.monotonic() + CLOSE_WAIT
        while time.monotonic() < deadline:
            done, _ = os.waitpid(child.pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            _kill(child.pid)
        self._forget()

    def _kill(self) -> None:
        if self.child is not None:
            _kill(self.child.pid)
            self._forget()

    def _forget(self) -> None:
        child, self.child = self.child, None
        if child is None:
            return
        for fd in (child.commands, child.reports):
            with contextlib.suppress(OSError):
                os.close(fd)
        child.faults.close()


def register(config: pytest.Config, mode: str, lesson_of: LessonOf,
             missing: Callable[[list[str]], list[str]] | None = None) -> None:
    """Register the isolation hooks unless `mode` is off or a debugger is asked for. `missing`: the run's
    capabilities' `missing` (default: the built-in capabilities')."""
    if mode not in MODES:
        raise pytest.UsageError(f"--course-isolate: expected one of {', '.join(MODES)}, got {mode!r}")
    if mode == "off" or config.getoption("usepdb", False) or config.getoption("trace", False):
        return
    config.pluginmanager.register(Isolation(config, mode, lesson_of, missing), "hpccourse-isolate")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _receive(child: _Child, nodeid: str, deadline: float | None) -> tuple[list[Any], int | None, bool]:
    """The child's reports for `nodeid`, up to its teardown report; stops early when the child exits or
    `deadline` passes (then it is killed). Returns (reports as dicts, wait status if it exited, killed)."""
    messages: list[Any] = []
    eof = False

    def read() -> bool:
        """Read what is there; True once the test's teardown report arrived."""
        nonlocal eof
        chunk = os.read(child.reports, 1 << 16)
        if not chunk:
            eof = True
            return False
        child.buffer.extend(chunk)
        while len(child.buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(child.buffer)
            if len(child.buffer) < _HEADER.size + size:
                break
            data = pickle.loads(bytes(child.buffer[_HEADER.size:_HEADER.size + size]))
            del child.buffer[:_HEADER.size + size]
            if data.get("nodeid") == nodeid:
                messages.append(data)
        return bool(messages) and messages[-1].get("when") == "teardown"

    while True:
        if eof:
            time.sleep(0.01)  # it closed its end of the pipe and is exiting
        else:
            wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            if select.select([child.reports], [], [], wait)[0]:
                if read():
                    return messages, None, False
                continue
        done, status = os.waitpid(child.pid, os.WNOHANG)
        if done:
            # what it wrote before exiting (a process it started may hold the pipe open: no waiting for EOF)
            while not eof and select.select([child.reports], [], [], 0)[0]:
                if read():
                    break
            return messages, status, False
        if deadline is not None and time.monotonic() >= deadline:
            _kill(child.pid)
            return messages, None, True


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _machinery(line: str) -> bool:
    """A faulthandler line about pytest's own frames (or the extension module list): not the learner's."""
    return line.startswith("Extension modules") or any(
        part in line for part in ("/_pytest/", "/pluggy/", "pytest_hpccourse/grading/isolate.py", "bin/pytest"))


def _crash_reports(item: pytest.Item, got: list[pytest.TestReport], message: str, trace: str,
                   wall: float) -> list[pytest.TestReport]:
    """A failed report for the phase the child died in, and a teardown report to close the test."""
    when = "setup" if not got else "call" if got[-1].when == "setup" and got[-1].passed else "teardown"
    elapsed = time.time() - wall
    sections: list[tuple[str, str]] = []
    err = ""
    capman = item.config.pluginmanager.getplugin("capturemanager")
    if capman is not None and capman.is_globally_capturing():
        out, err = capman.read_global_capture()  # what the child wrote before it died (fd capture)
        sections += [(f"Captured {name} {when}", text) for name, text in (("stdout", out), ("stderr", err)) if text]
    lines = [f"{message} while running the test ({when}); the other lessons are still graded.\n"]
    dump = [ln for ln in trace.splitlines() if ln.strip() and not _machinery(ln)]
    if dump:
        lines += ["Python stack of the test process when it died (faulthandler):\n"]
        lines += [ln + "\n" for ln in dump[:MAX_TRACE_LINES]]
    tail = [ln for ln in err.splitlines() if ln.strip()][-8:]
    if tail:
        lines += ["Last lines it wrote to stderr:\n"] + [ln + "\n" for ln in tail]
    path, lineno, _ = item.location
    longrepr = ReprExceptionInfo(reprtraceback=ReprTracebackNative(lines),
                                 reprcrash=ReprFileLocation(path, (lineno or 0) + 1, message))
    common = {"nodeid": item.nodeid, "location": item.location, "keywords": dict.fromkeys(item.keywords, 1),
              "user_properties": list(item.user_properties)}
    crashed = pytest.TestReport(outcome="failed", longrepr=longrepr, when=when, sections=sections,
                                duration=elapsed, start=wall, stop=wall + elapsed, **common)
    if when == "teardown":
        return [crashed]
    closing = pytest.TestReport(outcome="passed", longrepr=None, when="teardown", start=wall + elapsed,
                                stop=wall + elapsed, **common)
    return [crashed, closing]


def _parent_teardown(item: pytest.Item, nextitem: pytest.Item | None,
                     teardown: pytest.TestReport) -> pytest.TestReport:
    """Tear down, in the parent, what the parent had set up and `nextitem` does not need (as pytest would)."""
    session = item.session
    if session.shouldfail or session.shouldstop:
        nextitem = None
    call = CallInfo.from_call(lambda: session._setupstate.teardown_exact(nextitem), when="teardown")
    if call.excinfo is None or not teardown.passed:
        return teardown
    report: pytest.TestReport = item.ihook.pytest_runtest_makereport(item=item, call=call)
    report.user_properties = list(teardown.user_properties)
    return report


# ---- child --------------------------------------------------------------------------------------


class _Chain:
    """Stands in for `nextitem` in the child's last teardown: keep exactly the nodes the parent had set up."""

    def __init__(self, nodes: list[Any]) -> None:
        self._nodes = nodes

    def listchain(self) -> list[Any]:
        return list(self._nodes)


def _serve(session: pytest.Session, commands: int, reports: int, faults: IO[str],
           inherited: list[Any]) -> None:  # pragma: no cover - runs in the child
    """The child: run the tests the parent names, one after another, until told to stop; never return."""
    global _in_child
    _in_child = True
    code = CHILD_ERROR
    try:
        faulthandler.enable(file=faults, all_threads=False)
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)  # the parent's OpenMP pool is gone; a parallel region would hang
        setupstate = session._setupstate
        counts = {node: len(setupstate.stack[node][0]) for node in inherited}
        items = session.items
        while True:
            header = _read_exactly(commands, _HEADER.size)
            command = _read_exactly(commands, _HEADER.unpack(header)[0]) if header is not None else None
            if command is None:  # the parent closed the pipe: tear down what this child set up
                with contextlib.suppress(Exception):
                    setupstate.teardown_exact(_Chain(inherited))  # type: ignore[arg-type]
                break
            index, following, properties = pickle.loads(command)
            item = items[index]
            item.user_properties[:] = properties
            last = following < 0
            _run_one(item, _Chain(inherited) if last else items[following], reports)
            if last:
                break
        code = 0
        _finalize_own(setupstate, inherited, counts)
    except BaseException:  # noqa: BLE001 - the child must always end in os._exit, never return into pytest
        import traceback

        traceback.print_exc(file=faults)
        faults.flush()
    finally:
        os._exit(code)


def _run_one(item: pytest.Item, nextitem: Any, reports: int) -> None:  # pragma: no cover - runs in the child
    hook = item.config.hook
    settings = _timeout_settings(item)
    timer = bool(settings is not None and settings.timeout and not settings.func_only
                 and hasattr(hook, "pytest_timeout_set_timer"))
    if timer:
        hook.pytest_timeout_set_timer(item=item, settings=settings)
    report = call_and_report(item, "setup", log=False)
    _send(item.config, reports, report)
    if report.passed and not item.config.getoption("setuponly", False):
        _send(item.config, reports, call_and_report(item, "call", log=False))
    teardown = call_and_report(item, "teardown", log=False, nextitem=nextitem)
    if timer:
        hook.pytest_timeout_cancel_timer(item=item)
    _send(item.config, reports, teardown)
    if hasattr(item, "_request"):
        item._request = False  # as runtestprotocol does: the test's fixtures may go away
        item.funcargs = None  # type: ignore[attr-defined]


def _read_exactly(fd: int, size: int) -> bytes | None:  # pragma: no cover - runs in the child
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _send(config: pytest.Config, fd: int, report: pytest.TestReport) -> None:  # pragma: no cover
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    try:
        blob = pickle.dumps(data)
    except Exception:  # noqa: BLE001 - an unpicklable user property: send its repr
        data["user_properties"] = [(name, value if _picklable(value) else repr(value))
                                   for name, value in data.get("user_properties", [])]
        blob = pickle.dumps(data)
    _write_all(fd, _HEADER.pack(len(blob)) + blob)


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - whatever pickling raises means "not picklable"
        return False
    return True


def _finalize_own(setupstate: Any, inherited: list[Any], counts: dict[Any, int]) -> None:  # pragma: no cover
    """Run the finalizers the child added to inherited nodes (a session fixture it set up), newest first."""
    for node in reversed(inherited):
        finalizers = setupstate.stack.get(node, ([], None))[0]
        own = finalizers[counts[node]:]
        del finalizers[counts[node]:]
        for fin in reversed(own):
            with contextlib.suppress(Exception):  # best effort: the child exits right after
                fin()
