"""One local Ray instance for all the pytest runs of `hpccourse check`.

Checking a Ray lesson runs pytest once for the reference, once for the blank and once per mutant; each run
that started its own Ray would spend seconds (tens under load) bringing up GCS, raylet and workers. Instead,
`hpccourse check` starts one instance here, in a child process it owns, and hands every run its address
through `RAY_ADDRESS`, which `distributed.ray_session` connects to. Actors a run creates belong to that
run's driver and die with it; the instance goes away when the check ends.

Not used when `RAY_ADDRESS` is already set (the runs use that cluster), when Ray is not installed, or with
`HPCCOURSE_CHECK_SHARED_RAY=0`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator

# The child: start Ray, print its address, keep it up until stdin closes, then shut it down.
_HEAD = r"""
import shutil, sys, tempfile
import ray

cpus, memory = int(sys.argv[1]), int(sys.argv[2])
temp_dir = tempfile.mkdtemp(prefix="hpcray-")  # short: Ray's socket paths are capped
ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
         _temp_dir=temp_dir, object_store_memory=memory, logging_level="WARNING")
import os
# a local instance turns on token authentication (RAY_AUTH_MODE=token in this process, the token in
# ~/.ray/auth_token): a driver that connects must run in the same mode
print("ADDRESS", ray.get_runtime_context().gcs_address, os.environ.get("RAY_AUTH_MODE", "-"), flush=True)
sys.stdin.read()
ray.shutdown()
shutil.rmtree(temp_dir, ignore_errors=True)
"""

START_TIMEOUT = 180.0  # seconds for the instance to come up on a loaded 2-core machine


def wanted() -> bool:
    """Whether `hpccourse check` should start a shared instance at all (see the module docstring)."""
    if os.environ.get("RAY_ADDRESS") or os.environ.get("HPCCOURSE_CHECK_SHARED_RAY") == "0":
        return False
    return importlib.util.find_spec("ray") is not None


@contextlib.contextmanager
def shared_ray(cpus: int, object_store_bytes: int = 256 * 1024**2) -> Iterator[dict[str, str]]:
    """Yield the environment a run needs to use a Ray instance with `cpus` logical CPUs (`RAY_ADDRESS`,
    and `RAY_AUTH_MODE` when the instance uses token authentication); empty when it did not start.

    A failure to start is not an error: the runs then start Ray themselves, as without this."""
    proc = subprocess.Popen([sys.executable, "-c", _HEAD, str(cpus), str(object_store_bytes)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    env: dict[str, str] = {}
    try:
        assert proc.stdout is not None
        words = _readline(proc, START_TIMEOUT).split()
        if len(words) == 3 and words[0] == "ADDRESS":
            env["RAY_ADDRESS"] = words[1]
            if words[2] != "-":
                env["RAY_AUTH_MODE"] = words[2]
        yield env
    finally:
        if proc.stdin:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    """The child's first line, or "" when it exits or stays silent for `timeout` seconds."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
    return proc.stdout.readline().strip()
