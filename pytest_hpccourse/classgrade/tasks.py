"""One grading task: a student's work on one module (its CPU or its GPU part), graded by pytest in a process of
its own.

`grade(spec, files, keys)` is the whole job and needs no Ray: it writes the pristine files and the submission's
overlay into a fresh temp dir, runs `python -m pytest <lessons> --course-report --course-json` there under
a memory limit (RLIMIT_AS, set in the child before pytest starts) and a wall-clock timeout (the whole process
group is killed), and returns the `--course-json` document or, when pytest left none, why. A submission's
own faults (a crash, a hang, a MemoryError) come back as a result, never as an exception, so Ray does not retry
them; `TransientError` (the task could not even start its process: disk, fork) is the one exception Ray retries,
besides the system failures it retries by itself (a worker or node that died).

`remote_grade` is `grade` as a Ray task; the driver (`command.py`) gives each call its resources:
`num_cpus=1`, `memory` (Ray's scheduling resource, the same bytes as the limit) and `num_gpus=1` for a GPU part.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_hpccourse import PLUGIN, package_parent, plugin_registered

MAX_RETRIES = 3  # Ray re-runs a task whose worker or node died this many times
OUTPUT_TAIL = 4000  # characters of pytest's output kept with a result
_DROP_ENV = ("HPCCOURSE_KEYS", "GITHUB_OUTPUT", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP")
# The child: cap the address space, then become pytest (one exec, no shell; setrlimit before any import).
_LIMITED = ("import os, resource, sys\n"
            "limit = int(sys.argv[1])\n"
            "if limit > 0:\n"
            "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
            "os.execv(sys.executable, [sys.executable, '-m', 'pytest', *sys.argv[2:]])\n")


class TransientError(RuntimeError):
    """The task could not run its pytest process at all (no disk, no fork): worth running again elsewhere."""


@dataclass
class TaskSpec:
    student: str
    module: str  # the pristine module's folder name
    part: str  # "cpu" | "gpu"
    commit: str
    grader: str  # grading version: plugin version + pristine digest
    lessons: list[str]  # module-relative lesson folders to run
    overlay: dict[str, bytes] = field(default_factory=dict)  # the learner's editable files
    timeout: float = 900.0  # seconds for the whole pytest run
    memory: int = 4 * 1024**3  # bytes of address space (RLIMIT_AS); 0 = no limit
    test_timeout: float | None = None  # per code test (pytest-timeout); None = the rubric's


@dataclass
class TaskResult:
    status: str  # "ok" (pytest wrote its report) | "timeout" | "crashed"
    reason: str = ""
    doc: dict[str, Any] | None = None  # the --course-json document
    answers_changed: list[str] = field(default_factory=list)  # lesson folders whose answers.yaml the run rewrote
    seconds: float = 0.0
    node: str = ""
    output: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _write(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        target = root / rel
        if root not in target.resolve().parents:  # a path from a roster must not escape the task dir
            raise ValueError(f"refusing to write outside the task folder: {rel}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The pytest child's environment: no Ray cluster address (a Ray lesson starts its own instance), no keys or
    Classroom output from the driver, one BLAS/OpenMP thread (the task holds one CPU)."""
    env = {k: v for k, v in (base if base is not None else os.environ).items()
           if not k.startswith("RAY_") and k not in _DROP_ENV}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"
    if not plugin_registered():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent(), env.get("PYTHONPATH")) if p)
    return env


def _has_pytest_timeout() -> bool:
    import importlib.util

    return importlib.util.find_spec("pytest_timeout") is not None


def pytest_args(spec: TaskSpec, report: Path, keys: Path | None) -> list[str]:
    args = [*spec.lessons, "-q", "-p", "no:cacheprovider", "--course-report", "--course-json", str(report)]
    if not plugin_registered():
        args[0:0] = ["-p", PLUGIN]
    if keys is not None:
        args += ["--course-keys", str(keys)]
    if spec.test_timeout and _has_pytest_timeout():
        args += [f"--timeout={spec.test_timeout:g}"]
    return args


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _crash_reason(returncode: int, output: str) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (out of memory?)" if -returncode == signal.SIGKILL else ""
        return f"pytest was killed by {name}{hint} before writing its report"
    last = next((ln for ln in reversed(output.strip().splitlines()) if ln.strip()), "")
    if "MemoryError" in output:
        return f"pytest ran out of memory (limit) before writing its report: {last[:200]}"
    return f"pytest exited with status {returncode} without a report: {last[:200]}"


def grade(spec: TaskSpec, files: dict[str, bytes], keys: bytes | None = None) -> TaskResult:
    """Grade one task in a temp dir of its own (module docstring); `files` is the pristine module."""
    import json

    start = time.monotonic()
    try:
        work = Path(tempfile.mkdtemp(prefix="hpcgrade-"))
    except OSError as exc:
        raise TransientError(f"cannot make a temp dir: {exc}") from exc
    try:
        root = work / spec.module
        root.mkdir()
        _write(root, files)
        _write(root, spec.overlay)
        keys_path = None
        if keys is not None:
            keys_path = work / "keys.toml"  # outside the module: not among the files the tests see
            keys_path.write_bytes(keys)
        report = work / "report.json"
        out_path = work / "pytest.out"
        cmd = [sys.executable, "-c", _LIMITED, str(int(spec.memory)), *pytest_args(spec, report, keys_path)]
        try:
            with open(out_path, "wb") as out:
                proc = subprocess.Popen(cmd, cwd=root, env=child_env(), stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise TransientError(f"cannot start pytest: {exc}") from exc
        timed_out = False
        try:
            proc.wait(timeout=spec.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_group(proc)  # also whatever the learner's code left running in the group
        output = out_path.read_text(encoding="utf-8", errors="replace")[-OUTPUT_TAIL:]
        result = TaskResult(status="ok", output=output)
        if timed_out:
            result.status, result.reason = "timeout", f"the run did not finish in {spec.timeout:g} s and was killed"
        else:
            try:
                result.doc = json.loads(report.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                result.status, result.reason = "crashed", _crash_reason(proc.returncode or 0, output)
        for rel, data in spec.overlay.items():  # the code under test must not rewrite the graded answers
            if rel.endswith("/answers.yaml"):
                target = root / rel
                if not target.is_file() or target.read_bytes() != data:
                    result.answers_changed.append(rel.rsplit("/", 1)[0])
        result.seconds = time.monotonic() - start
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_remote(spec: TaskSpec, files: dict[str, bytes], keys: bytes | None) -> dict[str, Any]:
    import ray

    result = grade(spec, files, keys)
    result.node = ray.get_runtime_context().get_node_id()
    return result.to_dict()


_REMOTE: Any = None


def remote_grade() -> Any:
    """`grade` as a Ray remote function (made once, after `ray.init`)."""
    global _REMOTE
    if _REMOTE is None:
        import ray

        _REMOTE = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=[TransientError])(_run_remote)
    return _REMOTE
