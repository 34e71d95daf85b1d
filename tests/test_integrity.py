"""The integrity manifest of a released repo and what counts as tampering."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_hpccourse.grading import integrity


def make_repo(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "scoring.toml").write_text("[points]\ncode = 4\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'm'\n")
    (root / "README.md").write_text("# module\n")
    for slug, lid in (("01-a", "m-01"), ("02-b", "m-02")):
        d = root / slug
        (d / "data").mkdir(parents=True)
        (d / "lesson.toml").write_text(f'id = "{lid}"\nfiles = ["kernel.py"]\ntests = ["test_kernel.py"]\n')
        (d / "kernel.py").write_text("def f():\n    raise NotImplementedError\n")
        (d / "test_kernel.py").write_text("def test_f(lesson):\n    assert lesson.load('kernel.py').f() == 1\n")
        (d / "helper.py").write_text("REF = 1\n")
        (d / "data" / "x.bin").write_bytes(b"\x00\x01\r\n")
        (d / "answers.yaml").write_text("Q1:\n")
        (d / "README.md").write_text("# lesson\n")
    (root / ".hpccourse").mkdir()
    (root / ".hpccourse" / "keys.toml").write_text('[m-01.Q1]\nanswer = 1\n')
    integrity.write_manifest(root)
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def test_manifest_lists_protected_files_only(repo: Path):
    entries = integrity.read_manifest(repo)
    assert sorted(entries) == [
        ".hpccourse/keys.toml",
        "01-a/data/x.bin", "01-a/helper.py", "01-a/lesson.toml", "01-a/test_kernel.py",
        "02-b/data/x.bin", "02-b/helper.py", "02-b/lesson.toml", "02-b/test_kernel.py",
        "pyproject.toml", "scoring.toml",
    ]
    assert integrity.modified_protected_files(repo) == {}


def test_manifest_is_sha256sum_format(repo: Path):
    if shutil.which("sha256sum") is None:
        pytest.skip("no sha256sum")
    proc = subprocess.run(["sha256sum", "--check", "--quiet", integrity.MANIFEST], cwd=repo,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_learner_edits_are_not_tampering(repo: Path):
    (repo / "01-a" / "kernel.py").write_text("def f():\n    return 1\n")
    (repo / "01-a" / "answers.yaml").write_text("Q1: 3\n")
    (repo / "01-a" / "README.md").write_text("# my notes\n")
    (repo / "01-a" / "scratch.txt").write_text("notes")
    (repo / "README.md").write_text("# edited\n")
    assert integrity.modified_protected_files(repo) == {}


def test_crlf_checkout_is_not_tampering(repo: Path):
    test = repo / "01-a" / "test_kernel.py"
    test.write_bytes(test.read_bytes().replace(b"\n", b"\r\n"))
    assert integrity.modified_protected_files(repo) == {}


@pytest.mark.parametrize("change, expected", [
    (lambda r: (r / "01-a" / "test_kernel.py").write_text("def test_f():\n    pass\n"),
     {"01-a": ["01-a/test_kernel.py"]}),
    (lambda r: (r / "02-b" / "lesson.toml").unlink(), {"02-b": ["02-b/lesson.toml"]}),
    (lambda r: (r / "02-b" / "helper.py").write_text("REF = 2\n"), {"02-b": ["02-b/helper.py"]}),
    (lambda r: (r / "01-a" / "conftest.py").write_text("x = 1\n"), {"01-a": ["01-a/conftest.py"]}),
    (lambda r: (r / "01-a" / "data" / "pytest.ini").write_text("[pytest]\n"),
     {"01-a": ["01-a/data/pytest.ini"]}),
    (lambda r: (r / "scoring.toml").write_text("[points]\ncode = 40\n"),
     {"01-a": ["scoring.toml"], "02-b": ["scoring.toml"]}),
    (lambda r: (r / ".hpccourse" / "keys.toml").write_text('[m-01.Q1]\nanswer = 7\n'),
     {"01-a": [".hpccourse/keys.toml"], "02-b": [".hpccourse/keys.toml"]}),
    (lambda r: (r / "conftest.py").write_text("x = 1\n"),
     {"01-a": ["conftest.py"], "02-b": ["conftest.py"]}),
])
def test_tampering_is_reported_per_lesson(repo: Path, change, expected):
    change(repo)
    assert integrity.modified_protected_files(repo) == expected


def test_find_repo_root(repo: Path, tmp_path: Path):
    assert integrity.find_repo_root(repo / "01-a" / "data") == repo.resolve()
    assert integrity.find_repo_root(repo) == repo.resolve()
    assert integrity.find_repo_root(tmp_path) is None


def test_lesson_at_the_repo_root(tmp_path: Path):
    (tmp_path / "lesson.toml").write_text('id = "x-01"\nfiles = ["k.py"]\n')
    (tmp_path / "k.py").write_text("x = 1\n")
    (tmp_path / "test_k.py").write_text("def test(): pass\n")
    integrity.write_manifest(tmp_path)
    (tmp_path / "test_k.py").write_text("def test(): assert 1\n")
    assert integrity.modified_protected_files(tmp_path) == {".": ["test_k.py"]}


@pytest.mark.parametrize("text", ["nonsense\n", "abc  file\n", "0" * 64 + "  ../etc/passwd\n",
                                  "0" * 64 + " single-space\n"])
def test_malformed_manifest_raises(repo: Path, text: str):
    (repo / integrity.MANIFEST).write_text(text)
    with pytest.raises(integrity.IntegrityError):
        integrity.modified_protected_files(repo)


def test_missing_manifest_raises(tmp_path: Path):
    with pytest.raises(integrity.IntegrityError):
        integrity.read_manifest(tmp_path)
