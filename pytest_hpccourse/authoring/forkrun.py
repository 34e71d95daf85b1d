"""Run pytest in forked children of one warm process, for `hpccourse check`.

`check` runs pytest two or more times per lesson (reference, blank, one run per mutant): hundreds of
runs for the whole course. Importing torch alone takes about 3 s on a CI core, so a fresh interpreter per
run spends much of a lesson's check on imports. Here one helper process (the "zygote") imports pytest,
numpy, torch and the plugin once and then only forks: each run is a fresh fork, in its own session (a
timeout kills everything it started), with its own environment and working directory, so runs are as
isolated from each other as subprocesses are.

The zygote imports and forks, nothing else: importing torch starts no thread pools and does not import
triton. Modules whose import reads what a run sets (triton reads TRITON_INTERPRET) are never preloaded.
Only on Linux (forking after importing torch is not safe on macOS). `HPCCOURSE_CHECK_FORK=0` turns it off:
every run is then a subprocess.

Protocol (zygote stdin/stdout, one JSON object per line): request {args, cwd, env, path, out}, reply {pid}.
The child writes its exit status to `out + ".rc"` when it finishes; the zygote ignores SIGCHLD, so a
finished child disappears at once and the caller waits for the pid to vanish.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# Imported once by the zygote. Only modules without import-time reads of what a run changes.
PRELOAD = ("yaml", "numpy", "pytest", "pytest_hpccourse.plugin", "torch")
_POLL = 0.02  # seconds between checks that a run's process is still there


def enabled() -> bool:
    """Whether check's runs fork from a warm process here (Linux, not turned off)."""
    return os.environ.get("HPCCOURSE_CHECK_FORK", "1") != "0" and sys.platform.startswith("linux")


def _child(req: dict) -> None:
    """One run, in the forked child: become `python -m pytest ARGS` started in `cwd` with `env`."""
    rc = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the run's own subprocesses must be waitable
        os.setsid()  # its own process group: a timeout kills what the run started too
        fd = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.path[:] = [req["cwd"], *req["path"], *(p for p in sys.path if p not in ("", "."))]
        sys.argv = ["pytest", *req["args"]]
        import pytest

        rc = int(pytest.main(req["args"]))
    except BaseException as exc:  # noqa: BLE001 - whatever happens, report it and exit
        with contextlib.suppress(Exception):
            print(f"hpccourse check: pytest raised {exc.__class__.__name__}: {exc}", file=sys.stderr)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(Exception):
            Path(req["out"] + ".rc").write_text(str(rc))
        os._exit(rc)


def serve() -> None:
    """The zygote's main loop: preload, then fork one child per request line until stdin closes."""
    for name in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel as they exit
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req)
        os.write(1, (json.dumps({"pid": pid}) + "\n").encode())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ForkRunner:
    """Starts `pytest ARGS` runs as forks of one zygote process that has imported `PRELOAD`.

    The zygote starts at the first run with `base_env` (libraries read OMP_NUM_THREADS and the like when
    they load) and ends when this object is closed or garbage-collected."""

    def __init__(self, base_env: Mapping[str, str]) -> None:
        self._env = dict(base_env)
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _zygote(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "from pytest_hpccourse.authoring.forkrun import serve; serve()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self._env, text=True, bufsize=1)
        return self._proc

    def _start(self, req: dict) -> int:
        with self._lock:
            proc = self._zygote()
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            reply = proc.stdout.readline()
        if not reply:
            raise RuntimeError("hpccourse check: the fork helper process ended")
        return int(json.loads(reply)["pid"])

    def run(self, args: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float,
            out: Path) -> int | None:
        """Exit status of `pytest ARGS` run in `cwd` with `env`, or None when it ran past `timeout`
        seconds (its whole process group is then killed). Its stdout and stderr go to `out`."""
        rc_file = Path(str(out) + ".rc")
        rc_file.unlink(missing_ok=True)
        path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        pid = self._start({"args": list(args), "cwd": str(cwd), "env": dict(env), "path": path,
                           "out": str(out)})
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(_POLL)
        timed_out = _alive(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # what the run left behind, or the run itself on a timeout
        while _alive(pid):
            time.sleep(_POLL)
        if timed_out:
            return None
        try:
            return int(rc_file.read_text())
        except (OSError, ValueError):
            return -1  # killed before it could write its status (a crash in native code, say)

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            self._proc = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
