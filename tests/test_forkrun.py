"""forkrun.py: check's pytest runs as forks of one warm process are as isolated as subprocesses."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from pytest_hpccourse.authoring import forkrun
from pytest_hpccourse.authoring.check import Runner

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork runner is Linux-only")


@pytest.fixture(scope="module")
def forker():
    env = dict(os.environ)
    env.pop("HPCCOURSE_SENTINEL", None)
    runner = forkrun.ForkRunner(env)
    yield runner
    runner.close()


def _write_tests(folder: Path, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_probe.py").write_text(body)


def test_each_run_gets_its_own_cwd_env_and_output(forker, tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    probe = (
        "import os, sys\n"
        "def test_probe():\n"
        "    print('CWD', os.getcwd(), 'SENTINEL', os.environ.get('HPCCOURSE_SENTINEL'), flush=True)\n"
        "    assert os.environ.get('HPCCOURSE_SENTINEL') == os.path.basename(os.getcwd())\n"
    )
    _write_tests(a, probe)
    _write_tests(b, probe)
    for folder in (a, b, a):
        env = {**os.environ, "HPCCOURSE_SENTINEL": folder.name}
        out = tmp_path / f"{folder.name}.out"
        rc = forker.run(["-q", "-s", "-p", "no:cacheprovider", "test_probe.py"], folder, env, 120, out)
        text = out.read_text()
        assert rc == 0, text
        assert f"CWD {folder} SENTINEL {folder.name}" in text


def test_state_left_by_one_run_is_not_seen_by_the_next(forker, tmp_path: Path):
    _write_tests(tmp_path, (
        "import json\n"
        "def test_leak():\n"
        "    assert not hasattr(json, 'planted')\n"
        "    json.planted = True\n"
    ))
    for i in range(2):
        out = tmp_path / f"{i}.out"
        assert forker.run(["-q", "-p", "no:cacheprovider", "test_probe.py"], tmp_path, dict(os.environ), 120,
                          out) == 0, out.read_text()


def test_failures_and_crashes_give_their_exit_status(forker, tmp_path: Path):
    _write_tests(tmp_path / "fail", "def test_fail():\n    assert 1 == 2\n")
    _write_tests(tmp_path / "crash", "import os\ndef test_crash():\n    os.abort()\n")
    out = tmp_path / "x.out"
    assert forker.run(["-q", "-p", "no:cacheprovider", "test_probe.py"], tmp_path / "fail", dict(os.environ), 120,
                      out) == 1
    assert "assert 1 == 2" in out.read_text()
    assert forker.run(["-q", "-p", "no:cacheprovider", "-p", "no:faulthandler", "test_probe.py"],
                      tmp_path / "crash", dict(os.environ), 120, out) == -1


def test_timeout_kills_the_run_and_what_it_started(forker, tmp_path: Path):
    pidfile = tmp_path / "grandchild.pid"
    _write_tests(tmp_path, (
        "import subprocess, sys, time\n"
        "def test_hang():\n"
        f"    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"    open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "    time.sleep(300)\n"
    ))
    t = time.monotonic()
    rc = forker.run(["-q", "-p", "no:cacheprovider", "test_probe.py"], tmp_path, dict(os.environ), 6,
                    tmp_path / "hang.out")
    assert rc is None and time.monotonic() - t < 30
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the subprocess started by the timed-out run is still alive")


def test_runner_uses_the_fork_runner_and_falls_back_when_off(monkeypatch):
    assert Runner(timeout=10, threads=1).fork is forkrun.enabled()
    monkeypatch.setenv("HPCCOURSE_CHECK_FORK", "0")
    assert not forkrun.enabled()
    assert Runner(timeout=10, threads=1).fork is False
