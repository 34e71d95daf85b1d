"""`@pytest.mark.interpreter`: run a Triton lesson test through the bounds-checked interpreter on a GPU box too.

On a machine without a GPU the plugin runs Triton through its interpreter (`TRITON_INTERPRET=1`) with the
bounds guard (`runtimes/triton/guard`), so a kernel that loads past a view fails there. On a GPU the same kernel is
compiled; a read past a view that sits inside a padded buffer returns valid memory and the test passes. A
test marked `interpreter` closes that gap: where the plugin did not select the interpreter (a lesson that
requires `triton` while `TRITON_INTERPRET` is not "1": a CUDA GPU is visible, or the user forced compiled
mode), its call phase runs the same test in a child `python -m pytest <nodeid>` with `TRITON_INTERPRET=1`
and `CUDA_VISIBLE_DEVICES=""` (torch sees no GPU, the `device` fixture gives "cpu", the plugin installs the
guard), and the parent test passes, fails (with the child's failure line) or skips as the child did.

Only the item's `runtest` is replaced: setup, teardown, reports, scores and pytest-timeout work as for any
test. The child gets the test's own timeout; the parent's is raised by `STARTUP` seconds for the child's
start-up (importing torch and triton). On a machine where the interpreter is already on the marker changes
nothing. `HPCCOURSE_INTERPRET_SUBPROCESS=1` forces the child run anyway (for the plugin's own tests, which
have no GPU); the child never inherits it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_hpccourse import PLUGIN, package_parent, plugin_registered

MARKER = "interpreter"
MARKER_HELP = (f"{MARKER}: this test also proves memory safety: where Triton would compile for a GPU, it runs "
               "in a subprocess through the Triton interpreter with the bounds guard, CUDA hidden")
FORCE_ENV = "HPCCOURSE_INTERPRET_SUBPROCESS"  # "1": take the subprocess path without a GPU (testing only)
STARTUP = 60.0  # seconds added to the parent's timeout for the child's start-up
OUTPUT_LINES = 60  # lines of the child's output quoted in a failure's long report
# environment the child must not inherit: the test-only switch, xdist's worker identity, output targets
_DROP_ENV = (FORCE_ENV, "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID",
             "PYTEST_CURRENT_TEST", "GITHUB_OUTPUT", "HPCCOURSE_KEYS")


def subprocess_mode(requires: Iterable[str]) -> bool:
    """Whether a marked code test of a lesson with these `requires` runs in an interpreter child here."""
    if os.environ.get(FORCE_ENV) == "1":
        return True
    return "triton" in set(requires) and os.environ.get("TRITON_INTERPRET") != "1"


def redirect(item: pytest.Item, requires: Iterable[str], timeout: float | None) -> bool:
    """Make a marked lesson code test run in the interpreter child (module docstring); False when the
    item is not marked or the interpreter is already on here. `timeout`: the test's own limit in seconds
    (None: none), which the child gets."""
    if item.get_closest_marker(MARKER) is None or not subprocess_mode(requires):
        return False
    if timeout:
        current = item.get_closest_marker("timeout")
        kwargs = {k: v for k, v in (current.kwargs if current else {}).items() if k != "timeout"}
        item.add_marker(pytest.mark.timeout(timeout + STARTUP, **kwargs), append=False)

    def runtest() -> None:
        run_in_interpreter(item, timeout)

    item.runtest = runtest  # type: ignore[method-assign]
    return True


def child_command(item: pytest.Item, report: Path, timeout: float | None) -> list[str]:
    """The `python -m pytest` command line that runs `item` alone and writes its course JSON to `report`."""
    config = item.config
    cmd = [sys.executable, "-m", "pytest", item.nodeid, "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           "--course-isolate=off", "--course-json", str(report), "--rootdir", str(config.rootpath),
           f"--import-mode={config.option.importmode}"]
    if config.inipath is not None:
        cmd += ["-c", str(config.inipath)]
    if not plugin_registered():
        cmd[3:3] = ["-p", PLUGIN]
    if timeout and config.pluginmanager.hasplugin("timeout"):
        if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            cmd += ["-p", "pytest_timeout"]
        cmd.append(f"--timeout={timeout:g}")
    return cmd


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
    env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", HPCCOURSE_CUDA="cpu", PYTHONDONTWRITEBYTECODE="1")
    if not plugin_registered():  # the package is importable here but not installed: load it by path
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent(), env.get("PYTHONPATH")) if p)
    return env


def run_in_interpreter(item: pytest.Item, timeout: float | None) -> None:
    """Run `item` in the interpreter child; return when it passed, else fail or skip as it did."""
    where = "in the Triton interpreter (memory-safety run)"
    with tempfile.TemporaryDirectory(prefix="hpccourse-interpret-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = child_command(item, report, timeout)
        try:
            proc = subprocess.run(cmd, cwd=item.config.rootpath, env=child_env(), capture_output=True, text=True,
                                  errors="replace", check=False,
                                  timeout=timeout + STARTUP + 10 if timeout else None)
        except subprocess.TimeoutExpired:
            pytest.fail(f"Timeout (>{timeout:g}s) {where}: the child process was killed", pytrace=False)
        output = (proc.stdout + proc.stderr).strip()
        try:
            doc = json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            doc = None
    outcome, message = _outcome(doc, item.nodeid)
    if outcome == "passed":
        return
    if outcome == "skipped":
        pytest.skip(message or "skipped")
    if outcome is None:
        code = proc.returncode
        status = f"crashed: {_signal_name(-code)} (signal {-code})" if code < 0 else f"exited {code}"
        message = f"the test process {status} without a result for this test"
    pytest.fail(f"{where}: {_short(message)}\n\n" + _tail(output), pytrace=False)


def _outcome(doc: dict[str, Any] | None, nodeid: str) -> tuple[str | None, str]:
    """The child's (outcome, message) for `nodeid` from its course JSON; (None, "") when it has none, or a
    lesson's code error (a collection error) as ("failed", message)."""
    if not doc:
        return None, ""
    lessons = doc.get("lessons", [])
    tests = [test for entry in lessons for test in entry.get("code", {}).get("tests", [])]
    found = [t for t in tests if t.get("nodeid") == nodeid] or (tests if len(tests) == 1 else [])
    if found:
        outcome = found[0].get("outcome")
        return ("failed" if outcome == "error" else outcome), found[0].get("message", "")
    for entry in lessons:
        code = entry.get("code", {})
        if code.get("status") in ("ERROR", "FAIL", "NEEDS") and code.get("message"):
            return ("skipped" if code["status"] == "NEEDS" else "failed"), code["message"]
    return None, ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _short(message: str) -> str:
    """The failure line with exception classes named without their module (TritonOutOfBoundsError: ...)."""
    return re.sub(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*(?:Error|Exception|Exit)\b)", "", message)


def _tail(output: str) -> str:
    lines = output.splitlines()
    shown = lines[-OUTPUT_LINES:]
    head = "output of the interpreter run" + (f" (last {OUTPUT_LINES} lines)" if len(lines) > len(shown) else "")
    return head + ":\n" + "\n".join(shown)
