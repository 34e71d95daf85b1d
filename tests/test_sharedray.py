"""The shared Ray instance of `hpccourse check` (`pytest_hpccourse.runtimes.ray.shared`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("ray")

from pytest_hpccourse.authoring import check
from pytest_hpccourse.runtimes.ray import shared  # noqa: E402

pytestmark = [pytest.mark.timeout(400), pytest.mark.xdist_group("ray")]


def test_a_separate_driver_connects_runs_and_its_actors_die_with_it(tmp_path):
    client = tmp_path / "client.py"
    client.write_text(textwrap.dedent("""
        import os
        from pytest_hpccourse.runtimes.ray.drills import ray_session, shutdown
        import ray

        s = ray_session()

        @ray.remote(num_cpus=0)
        class A:
            def pid(self):
                return os.getpid()

        a = A.remote()
        print("OWNED", s.owned, "ADDRESS", s.address, "PID", ray.get(a.pid.remote()))
        shutdown()
    """))
    with shared.shared_ray(cpus=2) as extra:
        assert set(extra) >= {"RAY_ADDRESS"}, extra
        env = {**os.environ, **extra}
        pids = []
        for _ in range(2):  # two runs in turn, as `check` does
            out = subprocess.run([sys.executable, str(client)], env=env, capture_output=True, text=True,
                                 timeout=300)
            assert out.returncode == 0, out.stderr[-2000:]
            line = next(ln for ln in out.stdout.splitlines() if ln.startswith("OWNED"))
            words = line.split()
            assert words[3] == extra["RAY_ADDRESS"]
            pids.append(int(words[5]))
        for pid in pids:  # a run's actors end with its driver, not with the instance
            for _ in range(100):
                if not os.path.exists(f"/proc/{pid}"):
                    break
                subprocess.run(["sleep", "0.2"], check=False)
            assert not os.path.exists(f"/proc/{pid}"), f"actor process {pid} outlived its driver"


def test_not_wanted_with_an_address_or_when_switched_off(monkeypatch):
    monkeypatch.delenv("HPCCOURSE_CHECK_SHARED_RAY", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert not shared.wanted()
    monkeypatch.delenv("RAY_ADDRESS")
    assert shared.wanted()
    monkeypatch.setenv("HPCCOURSE_CHECK_SHARED_RAY", "0")
    assert not shared.wanted()


def test_check_starts_it_only_for_ray_lessons(tmp_path):
    plain, ray_lesson = tmp_path / "m" / "01-a", tmp_path / "m" / "02-b"
    for d, req in ((plain, '["numpy"]'), (ray_lesson, '["ray"]')):
        d.mkdir(parents=True)
        (d / "lesson.toml").write_text(f'id = "x-0{d.name[1]}"\nrequires = {req}\n')
    assert not check._needs_ray([plain])
    assert check._needs_ray([tmp_path / "m"])
