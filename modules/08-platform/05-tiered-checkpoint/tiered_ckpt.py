"""platform-05: a tiered asynchronous checkpoint writer (memory -> local dir -> "remote" dir).

`CheckpointWriter.save(step, state)` takes a snapshot of `state` (a dict of bytearrays that the
training loop keeps mutating) before it returns, then a background thread writes the snapshot to
the local tier and copies it to the remote tier. Each tier holds step directories
`step_00000012/` with one `<name>.bin` file per entry and a `MANIFEST.json` (sha256 and size of
every file) that is the commit record: a step directory without a manifest does not exist for
the reader, and one with a manifest must verify (`load_latest`). After a tier has the new step
durably, older step directories beyond `keep` are deleted.

Durability (power loss, not just a killed process) needs, per tier and step:
file data fsync'd before the manifest that vouches for it becomes visible; the manifest itself
written to a temporary name, fsync'd and renamed into place (os.replace); the directories whose
entries changed fsync'd (fsync(2): "an explicit fsync() on a file descriptor for the directory is
also needed"); deletions of old checkpoints only after all of that.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

MANIFEST = "MANIFEST.json"


class TornCheckpoint(Exception):
    """A step directory has a manifest but its files do not match it."""


def step_dir(tier: Path, step: int) -> Path:
    return tier / f"step_{step:08d}"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fsync_dir(path: Path) -> None:
    """fsync a directory: makes the creation, rename or removal of its entries durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: Path, data: bytes) -> None:
    """Write `data` to `path` (created or truncated) and fsync the file before closing it."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def manifest_bytes(step: int, snapshot: dict[str, bytes]) -> bytes:
    files = {f"{k}.bin": {"sha256": sha256(v), "size": len(v)} for k, v in sorted(snapshot.items())}
    return json.dumps({"step": step, "files": files}, indent=1).encode()


def complete_steps(tier: Path) -> list[int]:
    """Steps whose directory holds a manifest, newest first (leftovers without one are ignored)."""
    if not tier.is_dir():
        return []
    steps = [int(p.name[5:]) for p in tier.iterdir()
             if p.name.startswith("step_") and p.name[5:].isdigit() and (p / MANIFEST).exists()]
    return sorted(steps, reverse=True)


def load_latest(tier: Path) -> tuple[int, dict[str, bytes]] | None:
    """The newest committed checkpoint of a tier, verified; None if there is none. A manifest is a
    promise: if its files are missing, short or differ, this raises TornCheckpoint."""
    steps = complete_steps(tier)
    if not steps:
        return None
    d = step_dir(tier, steps[0])
    try:
        man = json.loads((d / MANIFEST).read_bytes())
    except ValueError as e:
        raise TornCheckpoint(f"{d / MANIFEST}: {e}") from e
    state = {}
    for name, meta in man["files"].items():
        p = d / name
        data = p.read_bytes() if p.exists() else b""
        if len(data) != meta["size"] or sha256(data) != meta["sha256"]:
            raise TornCheckpoint(f"{p}: {len(data)} bytes, manifest says {meta['size']}")
        state[name.removesuffix(".bin")] = data
    if man["step"] != steps[0]:
        raise TornCheckpoint(f"{d}: manifest of step {man['step']}")
    return steps[0], state


def commit_step(tier: Path, step: int, snapshot: dict[str, bytes], keep: int) -> None:
    """Write `snapshot` as step `step` of `tier` so that a crash at any point leaves the previous
    committed step loadable, then delete committed steps older than the newest `keep` (and
    leftovers of failed attempts older than `step`)."""
    tier.mkdir(parents=True, exist_ok=True)
    d = step_dir(tier, step)
    ### HINT: data files durable -> manifest via temp name + os.replace -> directory fsyncs -> only then delete old steps
    ### BEGIN SOLUTION
    d.mkdir(exist_ok=True)
    fsync_dir(tier)  # the new step directory's entry in the tier
    for key, data in snapshot.items():
        write_file_durably(d / f"{key}.bin", data)
    tmp = d / (MANIFEST + ".tmp")
    write_file_durably(tmp, manifest_bytes(step, snapshot))
    os.replace(tmp, d / MANIFEST)
    fsync_dir(d)  # the .bin entries and the manifest's rename
    for old in complete_steps(tier)[keep:]:
        shutil.rmtree(step_dir(tier, old))
    for p in tier.iterdir():
        if p.name.startswith("step_") and p.name < d.name and not (p / MANIFEST).exists():
            shutil.rmtree(p)
    ### END SOLUTION


class CheckpointWriter:
    """Tiered async writer: save() snapshots and returns; one background write at a time."""

    def __init__(self, local: Path, remote: Path, keep: int = 2) -> None:
        self.local, self.remote, self.keep = Path(local), Path(remote), keep
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _write(self, step: int, snapshot: dict[str, bytes]) -> None:
        try:
            commit_step(self.local, step, snapshot, self.keep)
            commit_step(self.remote, step, snapshot, self.keep)
        except BaseException as e:  # surfaced by wait()
            self.error = e

    def save(self, step: int, state: dict[str, bytearray]) -> None:
        """Snapshot `state` now (the caller may change it as soon as this returns) and write it in
        the background; waits first for a previous save that is still being written."""
        ### HINT: the snapshot must not share memory with `state`; the write must not block the caller
        ### BEGIN SOLUTION
        self.wait()
        snapshot = {k: bytes(v) for k, v in state.items()}
        self._thread = threading.Thread(target=self._write, args=(step, snapshot), daemon=True)
        self._thread.start()
        ### END SOLUTION

    def wait(self) -> None:
        """Block until the save in flight (if any) is durable in both tiers; re-raise its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            err, self.error = self.error, None
            raise err
