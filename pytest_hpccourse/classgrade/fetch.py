"""Get a student's repository and decide which commit is graded.

Each repository is kept as a bare mirror under the cache folder (`git clone --mirror`, then `git remote update`
on later runs), so a rerun fetches only what is new and nothing is checked out: the files the grader needs are
read from the commit's tree (`overlay.py`).

Which commit: the roster's `commit` column when given; else, with a deadline, the last commit on the default
branch committed before it (`git rev-list -1 --before=<deadline> HEAD`, committer dates, which the student's
own git wrote: a forged date is not detected here); else the tip of the default branch.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .roster import Submission

GIT_TIMEOUT = 300.0  # seconds for one git command (a clone over a slow network)


class FetchError(Exception):
    """The repository cannot be cloned or updated, or the commit asked for does not exist."""


@dataclass(frozen=True)
class Checkout:
    git_dir: Path  # the bare mirror
    commit: str  # the graded commit ('' when there is none before the deadline)
    first: str  # the repository's first commit (the release the student started from)
    committed_at: str  # ISO committer date of the graded commit


def git(git_dir: Path | None, *args: str, timeout: float = GIT_TIMEOUT) -> str:
    """Output of `git ARGS` (in `git_dir` when given); FetchError with git's message on failure."""
    cmd = ["git", *(["--git-dir", str(git_dir)] if git_dir else []), *args]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise FetchError(f"git {args[0]} timed out after {timeout:g} s") from exc
    if proc.returncode != 0:
        message = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise FetchError(f"git {args[0]}: {message[-1] if message else f'exit status {proc.returncode}'}")
    return proc.stdout


def git_blob(git_dir: Path, oid: str) -> bytes:
    """The content of blob `oid` as bytes (a learner's file need not be UTF-8)."""
    proc = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "blob", oid], capture_output=True,
                          timeout=GIT_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise FetchError(f"git cat-file {oid}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def git_deadline(deadline: str) -> str:
    """The deadline as git reads it without ambiguity (`@<unix seconds>`); a time without a zone is local time."""
    try:
        when = dt.datetime.fromisoformat(deadline)
    except ValueError as exc:
        raise ValueError(f"not an ISO time: {deadline!r} (e.g. 2026-05-01T23:59:00+08:00)") from exc
    if when.tzinfo is None:
        when = when.astimezone()
    return f"@{int(when.timestamp())}"


def mirror(sub: Submission, cache: Path) -> Path:
    """The up-to-date bare mirror of the student's repository in `cache`."""
    target = cache / (sub.key + ".git")
    if target.is_dir():
        try:
            git(target, "remote", "set-url", "origin", sub.repo)
            git(target, "remote", "update", "--prune")
            return target
        except FetchError:  # a broken mirror (a killed clone): start again
            shutil.rmtree(target, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    git(None, "clone", "--quiet", "--mirror", sub.repo, str(partial))
    partial.rename(target)
    return target


def fetch(sub: Submission, cache: Path, deadline: str | None = None) -> Checkout:
    """Mirror the repository and pick the graded commit (module docstring)."""
    git_dir = mirror(sub, cache)
    if sub.commit:
        commit = git(git_dir, "rev-parse", "--verify", "--quiet", f"{sub.commit}^{{commit}}").strip()
    else:
        try:
            git(git_dir, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        except FetchError as exc:
            raise FetchError("the repository has no commits") from exc
        args = ["rev-list", "-1", *([f"--before={git_deadline(deadline)}"] if deadline else []), "HEAD"]
        commit = git(git_dir, *args).strip()
    if not commit:
        return Checkout(git_dir, "", "", "")
    roots = git(git_dir, "rev-list", "--max-parents=0", "--date-order", commit).split()
    when = git(git_dir, "show", "-s", "--format=%cI", commit).strip()
    return Checkout(git_dir, commit, roots[-1] if roots else commit, when)
