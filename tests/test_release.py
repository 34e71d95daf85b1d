"""`hpccourse release`: the learner repo's content, that it grades standalone, and that its
Classroom workflow (template-repo/) feeds the reporter what `pytest --course-classroom` writes
(checked by emulating classroom-resources/autograding-grading-reporter@v1: runners -> env
<ID>_RESULTS -> base64 -> JSON -> points)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import yaml

from pytest_hpccourse.authoring import check, release
from pytest_hpccourse.authoring.regions import find_regions
from pytest_hpccourse.grading import integrity, manifest

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "release" / "modules" / "00-demo"
LESSONS = {"01-axpy": ("demo-01", "axpy.py"), "02-scan": ("demo-02", "scan.py")}


def tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def source_toml(slug: str) -> dict:
    return tomllib.loads((FIXTURE / slug / "lesson.toml").read_text(encoding="utf-8"))


def run_course(cwd: Path, *args: str, env: dict[str, str] | None = None,
               python: str = sys.executable, report: Path | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m pytest ARGS --course-json` in `cwd`; returns the process and the report."""
    report = report or cwd.parent / f"{cwd.name}-report.json"
    report.unlink(missing_ok=True)
    runner = check.Runner(timeout=300, threads=1)
    cmd = [python, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "--course-json", str(report)]
    if python == sys.executable:
        full_env = runner.env() | (env or {})
        if not runner.registered:
            cmd[3:3] = ["-p", check.PLUGIN]
    else:  # another interpreter: exactly the environment given
        full_env = dict(env or {})
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300)
    assert report.is_file(), proc.stdout + proc.stderr
    return proc, json.loads(report.read_text(encoding="utf-8"))


def by_id(doc: dict) -> dict[str, dict]:
    return {lesson["id"]: lesson for lesson in doc["lessons"]}


def copy_reference_back(repo: Path, *, answers: bool = True) -> None:
    for slug, (_, code) in LESSONS.items():
        shutil.copyfile(FIXTURE / slug / code, repo / slug / code)
        if answers:
            shutil.copyfile(FIXTURE / slug / "answers.yaml", repo / slug / "answers.yaml")


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    before = tree_digest(FIXTURE)
    out = tmp_path_factory.mktemp("release") / "demo"
    assert release.main([str(FIXTURE), "--out", str(out)]) == 0
    assert tree_digest(FIXTURE) == before, "release wrote to the source tree"
    return out


@pytest.fixture(scope="module")
def released_no_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "demo-nokeys"
    assert release.main([str(FIXTURE), "--out", str(out), "--no-keys"]) == 0
    return out


# ---- content ---------------------------------------------------------------------------------

def test_layout(released: Path):
    files = {p.relative_to(released).as_posix() for p in released.rglob("*") if p.is_file()}
    assert files == {
        ".gitattributes", ".gitignore", ".github/workflows/classroom.yml",
        ".hpccourse/keys.toml", ".hpccourse/manifest.sha256",
        "README.md", "pyproject.toml", "scoring.toml",
        *(f"{slug}/{name}" for slug, (_, code) in LESSONS.items()
          for name in ("README.md", "answers.yaml", "lesson.toml", code, f"test_{code}")),
    }
    assert (released / "scoring.toml").read_bytes() == (REPO / "scoring.toml").read_bytes()


def test_solutions_are_blanked(released: Path):
    for slug, (lid, code) in LESSONS.items():
        source = (FIXTURE / slug / code).read_text(encoding="utf-8")
        solution = [line.strip() for r in find_regions(source, code)
                    for line in source.splitlines()[r.begin:r.end - 1] if line.strip()]
        assert solution
        blank = (released / slug / code).read_text(encoding="utf-8")
        assert f'raise NotImplementedError("TODO({lid}): ' in blank
        for line in solution:
            assert line not in blank
    for p in released.rglob("*"):
        if p.is_file():
            assert b"BEGIN SOLUTION" not in p.read_bytes(), p


def test_lesson_toml_loses_keys_and_mutants_only(released: Path):
    for slug in LESSONS:
        src = source_toml(slug)
        rel = tomllib.loads((released / slug / "lesson.toml").read_text(encoding="utf-8"))
        assert "mutants" not in rel
        assert {k: v for k, v in rel.items() if k != "questions"} == \
               {k: v for k, v in src.items() if k not in ("questions", "mutants")}
        assert rel["questions"] == [{k: v for k, v in q.items() if k not in manifest.KEY_FIELDS}
                                    for q in src["questions"]]
        lesson = manifest.load_lesson(released / slug)  # still a valid manifest, without keys
        assert not any(q.has_key for q in lesson.questions)


def test_keys_file_holds_every_key(released: Path):
    keys = tomllib.loads((released / integrity.KEYS).read_text(encoding="utf-8"))
    expected = {}
    for slug, (lid, _) in LESSONS.items():
        expected[lid] = {q["id"]: {k: q[k] for k in manifest.KEY_FIELDS if k in q}
                         for q in source_toml(slug)["questions"]}
    assert keys == expected
    assert manifest.read_keys(released / integrity.KEYS) == expected  # the plugin's reader agrees


def test_answers_yaml_has_prompts_as_comments_and_empty_values(released: Path):
    for slug in LESSONS:
        text = (released / slug / "answers.yaml").read_text(encoding="utf-8")
        assert yaml.safe_load(text) == {"Q1": None, "Q2": None, "Q3": None}
        comments = "\n".join(line for line in text.splitlines() if line.startswith("#"))
        for q in source_toml(slug)["questions"]:
            assert q["prompt"] in comments
            for option in q.get("options", []):
                assert option in comments
        # the generic help lines (header, "# Qn [kind] ...") never spell a key, even by accident
        help_lines = [line for line in text.splitlines()
                      if line.startswith(("# Q1 [", "# Q2 [", "# Q3 [")) or text.index(line) < text.index("\n\n")]
        for q in source_toml(slug)["questions"]:
            if "answer" in q:
                spelled = yaml.safe_dump(q["answer"], default_flow_style=True).strip().removesuffix("...").strip()
                token = re.compile(rf"(?<!\w){re.escape(spelled)}(?!\w)")
                assert not any(token.search(line) for line in help_lines), (spelled, help_lines)


def test_template_files_and_readme(released: Path):
    template = REPO / "template-repo"
    for rel in (".github/workflows/classroom.yml", ".gitignore", ".gitattributes"):
        assert (released / rel).read_bytes() == (template / rel).read_bytes()
    assert not (released / "instructor").exists()
    readme = (released / "README.md").read_text(encoding="utf-8")
    module_readme = (FIXTURE / "README.md").read_text(encoding="utf-8").rstrip()
    assert readme.startswith(module_readme)
    assert readme.endswith((template / "README.md").read_text(encoding="utf-8"))


def test_manifest_matches_the_release(released: Path):
    assert integrity.find_repo_root(released / "01-axpy") == released.resolve()
    assert integrity.modified_protected_files(released) == {}
    listed = integrity.read_manifest(released)
    assert {"01-axpy/test_axpy.py", "01-axpy/lesson.toml", "scoring.toml", ".hpccourse/keys.toml"} <= set(listed)
    assert "01-axpy/axpy.py" not in listed and "01-axpy/answers.yaml" not in listed


def test_no_keys_leaves_every_key_out(released_no_keys: Path):
    assert not (released_no_keys / ".hpccourse" / "keys.toml").exists()
    secrets = [q["explanation"] for slug in LESSONS for q in source_toml(slug)["questions"]]
    secrets += ["3*n*b", "up-sweep"]
    for p in released_no_keys.rglob("*"):
        if p.is_file() and p.suffix in (".toml", ".yaml", ".py", ".md", ".sha256"):
            text = p.read_text(encoding="utf-8")
            for secret in secrets:
                assert secret not in text, (p, secret)


def test_gpu_runner_variant(tmp_path: Path):
    out = tmp_path / "gpu"
    assert release.main([str(FIXTURE), "--out", str(out), "--gpu-runner"]) == 0
    workflow = (out / ".github/workflows/classroom.yml").read_text(encoding="utf-8")
    assert workflow == (REPO / "template-repo/instructor/classroom-gpu.yml").read_text(encoding="utf-8")
    assert "self-hosted" in workflow


# ---- errors ----------------------------------------------------------------------------------

def broken_copy(tmp_path: Path, edit) -> Path:
    module = tmp_path / "course" / "modules" / "00-demo"
    shutil.copytree(FIXTURE, module)
    shutil.copyfile(REPO / "scoring.toml", tmp_path / "course" / "scoring.toml")
    shutil.copytree(REPO / "template-repo", tmp_path / "course" / "template-repo")
    edit(module)
    return module


@pytest.mark.parametrize("edit, message", [
    (lambda m: (m / "01-axpy/axpy.py").write_text(
        (m / "01-axpy/axpy.py").read_text().replace("    ### END SOLUTION\n", "")),
     "01-axpy/axpy.py:11: BEGIN SOLUTION is never closed"),
    (lambda m: (m / "02-scan/scan.py").write_text(
        (m / "02-scan/scan.py").read_text().replace("### BEGIN SOLUTION", "## BEGIN SOLUTION")),
     "02-scan/scan.py:11: malformed solution marker"),
    (lambda m: (m / "01-axpy/axpy.py").write_text(
        "X = (1 +\n    ### BEGIN SOLUTION\n    2\n    ### END SOLUTION\n)\n"),
     "01-axpy/axpy.py:2: the released blank does not compile"),
    (lambda m: (m / "01-axpy/lesson.toml").write_text(
        (m / "01-axpy/lesson.toml").read_text().replace('id = "Q3"', 'id = "Q4"')),
     "questions[2].id"),
    (lambda m: (m / "02-scan/lesson.toml").write_text(
        (m / "02-scan/lesson.toml").read_text().replace('"demo-02"', '"demo-01"')),
     "id 'demo-01' already used"),
    (lambda m: (m / "pyproject.toml").unlink(), "no pyproject.toml"),
])
def test_release_errors_name_the_file(tmp_path: Path, capsys, edit, message):
    module = broken_copy(tmp_path, edit)
    out = tmp_path / "out"
    assert release.main([str(module), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not out.exists(), "a failed release leaves no half-written repo"


def test_out_must_be_new_or_empty_and_outside_the_module(tmp_path: Path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert release.main([str(FIXTURE), "--out", str(tmp_path / "full")]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert (tmp_path / "full" / "x").read_text() == "x"
    module = broken_copy(tmp_path / "c", lambda m: None)
    assert release.main([str(module), "--out", str(module / "released")]) == 2
    assert "inside the module" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert release.main([str(FIXTURE), "--out", str(tmp_path / "empty")]) == 0


# ---- grading the released repo ---------------------------------------------------------------

def test_blank_scores_zero(released: Path):
    proc, doc = run_course(released)
    lessons = by_id(doc)
    assert set(lessons) == {"demo-01", "demo-02"}, proc.stdout
    for lesson in lessons.values():
        assert lesson["score"] == 0 and lesson["status"] == "FAIL"
        assert lesson["code"]["score"] == 0 and "NotImplementedError" in lesson["code"]["message"]
        assert [q["status"] for q in lesson["questions"]] == ["FAIL"] * 3


def test_reference_copied_back_scores_ten(released: Path, tmp_path: Path):
    repo = tmp_path / "repo"
    shutil.copytree(released, repo)
    copy_reference_back(repo)
    proc, doc = run_course(repo)
    assert [(le["id"], le["score"], le["status"]) for le in doc["lessons"]] == \
           [("demo-01", 10.0, "PASS"), ("demo-02", 10.0, "PASS")], proc.stdout


def test_keys_from_option_env_or_nowhere(released: Path, released_no_keys: Path, tmp_path: Path):
    repo = tmp_path / "repo"
    shutil.copytree(released_no_keys, repo)
    copy_reference_back(repo)
    _, doc = run_course(repo)
    for lesson in doc["lessons"]:
        assert lesson["code"]["score"] == 4.0
        assert [q["status"] for q in lesson["questions"]] == ["NEEDS"] * 3
        assert lesson["status"] == "NEEDS" and "key" in lesson["needs"]
    keys = tmp_path / "instructor-keys.toml"
    shutil.copyfile(released / integrity.KEYS, keys)
    for args, env in ((["--course-keys", str(keys)], {}), ([], {"HPCCOURSE_KEYS": str(keys)})):
        _, doc = run_course(repo, *args, env=env)
        assert [(le["score"], le["status"]) for le in doc["lessons"]] == [(10.0, "PASS")] * 2, args or env


def classroom_payload(output_file: Path) -> dict:
    """What the reporter gets: the step output `result`, base64 JSON (GitHub's name=value format)."""
    values = dict(line.split("=", 1) for line in output_file.read_text().splitlines() if "=" in line)
    return json.loads(base64.b64decode(values["result"]).decode("utf-8"))


def test_tampered_tests_score_zero_in_classroom_mode(released: Path, tmp_path: Path):
    repo = tmp_path / "repo"
    shutil.copytree(released, repo)
    copy_reference_back(repo)
    test = repo / "01-axpy" / "test_axpy.py"
    test.write_text(test.read_text() + "\n\ndef test_extra():\n    assert True\n")
    output = tmp_path / "github_output"
    output.write_text("")
    _, doc = run_course(repo, "--course-classroom", env={"GITHUB_OUTPUT": str(output)})
    lessons = by_id(doc)
    assert lessons["demo-01"]["score"] == 0
    assert "tests modified" in lessons["demo-01"]["code"]["message"]
    assert "01-axpy/test_axpy.py" in lessons["demo-01"]["code"]["message"]
    assert lessons["demo-02"]["score"] == 10
    payload = classroom_payload(output)
    scores = {t["name"].split()[0]: t["score"] for t in payload["tests"]}
    assert scores == {"demo-01": 0, "demo-02": 10}
    # self-study runs (no --course-classroom) grade the edited tests as they are
    _, doc = run_course(repo)
    assert by_id(doc)["demo-01"]["score"] == 10


# ---- a fresh virtual environment -------------------------------------------------------------

def test_release_works_from_a_fresh_venv(released: Path, tmp_path: Path):
    """The plugin installed (not editable, no source tree on the path) into a new venv; the
    released repo installed there too; blank -> 0, reference copied back -> 10.

    Third-party packages (pytest, numpy, PyYAML, setuptools) come from this environment through
    a .pth file, so the test needs no network and stays quick; the course package itself does not.
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    vsite = Path(subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                check=True, capture_output=True, text=True).stdout.strip())
    (vsite / "outer-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "HPCCOURSE_KEYS")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    build = tmp_path / "src"  # build from a copy: the source tree gets no build/ or egg-info
    shutil.copytree(REPO, build, ignore=shutil.ignore_patterns(
        ".git", ".venv", "tests", "modules", "*.egg-info", "build", "__pycache__", "benchmarks"))
    repo = tmp_path / "repo"
    shutil.copytree(released, repo)
    for target in (build, repo):
        pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "--no-deps",
                              "--no-build-isolation", "--no-index", "-q", str(target)],
                             env=env, capture_output=True, text=True, timeout=300)
        assert pip.returncode == 0, pip.stdout + pip.stderr
    where = subprocess.run([str(vpy), "-c", "import pytest_hpccourse; print(pytest_hpccourse.__file__)"],
                           cwd=repo, env=env, check=True, capture_output=True, text=True).stdout
    assert where.startswith(str(venv)), where

    _, doc = run_course(repo, python=str(vpy), env=env, report=tmp_path / "blank.json")
    assert [(le["id"], le["score"]) for le in doc["lessons"]] == [("demo-01", 0.0), ("demo-02", 0.0)]
    copy_reference_back(repo)
    _, doc = run_course(repo, python=str(vpy), env=env, report=tmp_path / "ref.json")
    assert [(le["id"], le["score"], le["status"]) for le in doc["lessons"]] == \
           [("demo-01", 10.0, "PASS"), ("demo-02", 10.0, "PASS")]


# ---- the Classroom workflow (template-repo/) --------------------------------------------------

TEMPLATE = Path(__file__).resolve().parent.parent / "template-repo"
WORKFLOWS = {"hosted": TEMPLATE / ".github/workflows/classroom.yml",
             "gpu": TEMPLATE / "instructor/classroom-gpu.yml"}
REPORTER = "classroom-resources/autograding-grading-reporter@v1"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def grade_and_reporter(doc: dict) -> tuple[dict, dict, list[dict]]:
    steps = doc["jobs"]["run-autograding-tests"]["steps"]
    reporter = [s for s in steps if s.get("uses") == REPORTER]
    assert len(reporter) == 1
    runner_id = reporter[0]["with"]["runners"]
    grade = [s for s in steps if s.get("id") == runner_id]
    assert len(grade) == 1, f"no step with id {runner_id!r}"
    return grade[0], reporter[0], steps


@pytest.mark.parametrize("kind", sorted(WORKFLOWS))
def test_workflow_structure(kind: str):
    doc = load(WORKFLOWS[kind])
    # The reporter only reports a workflow named exactly so, with this single job.
    assert doc["name"] == "Autograding Tests"
    assert list(doc["jobs"]) == ["run-autograding-tests"]
    assert "push" in doc["on"]
    assert doc["permissions"]["checks"] == "write"
    grade, reporter, steps = grade_and_reporter(doc)
    uses = [s.get("uses", "") for s in steps]
    assert uses[0].startswith("actions/checkout@")
    assert any(u.startswith("actions/setup-python@") for u in uses)
    install = next(s for s in steps if "pip install" in s.get("run", ""))
    assert "-e ." in install["run"]
    order = [s.get("name") for s in steps]
    assert order.index(install["name"]) < order.index(grade["name"]) < order.index(reporter["name"])
    # the grading step: one pytest run in Classroom mode
    pytest_lines = [line for line in grade["run"].splitlines() if re.search(r"\bpytest\b", line)]
    assert len(pytest_lines) == 1 and "--course-classroom" in pytest_lines[0]
    # the reporter: runs even when grading failed, gets <ID>_RESULTS from that step's output
    step_id = grade["id"]
    assert re.fullmatch(r"[a-zA-Z0-9]+", step_id)  # the reporter's own check on runner ids
    assert reporter["if"] == "always()"
    assert reporter["with"]["runners"] == step_id
    assert reporter["env"] == {f"{step_id.upper()}_RESULTS": f"${{{{ steps.{step_id}.outputs.result }}}}"}
    if kind == "gpu":
        runs_on = doc["jobs"]["run-autograding-tests"]["runs-on"]
        assert "self-hosted" in runs_on and "gpu" in runs_on


def test_workflows_differ_only_where_they_should():
    hosted, gpu = (grade_and_reporter(load(p)) for p in (WORKFLOWS["hosted"], WORKFLOWS["gpu"]))
    assert hosted[0]["id"] == gpu[0]["id"] and hosted[0]["run"] == gpu[0]["run"]
    assert hosted[1] == gpu[1]


def test_learner_readme_is_bilingual_and_complete():
    text = (TEMPLATE / "README.md").read_text(encoding="utf-8")
    for needle in ("安装", "Install", "answers.yaml", "TODO(", "pytest --course-report", "NEEDS",
                   "NEEDS key", "NEEDS cuda-gpu", "tests modified", "如何完成", "How to work"):
        assert needle in text, needle
    ignore = (TEMPLATE / ".gitignore").read_text(encoding="utf-8").split()
    assert {"__pycache__/", ".venv/", ".pytest_cache/"} <= set(ignore)


def reporter_emulation(step_outputs: dict[str, str], workflow: dict) -> dict:
    """What autograding-grading-reporter@v1 computes (src/main.js, src/notify-classroom.js)."""
    grade, reporter, _ = grade_and_reporter(workflow)
    env = {name: re.sub(r"\$\{\{\s*steps\.(\w+)\.outputs\.result\s*\}\}",
                        lambda m: step_outputs[m.group(1)], value)
           for name, value in reporter["env"].items()}
    runners = [r for r in re.split(r"[\s,]", reporter["with"]["runners"]) if r]
    results = [json.loads(base64.b64decode(env[f"{r.strip().upper()}_RESULTS"]).decode("utf-8"))
               for r in runners]
    total = sum(t["score"] for r in results if r.get("max_score") for t in r["tests"])
    maximum = sum(r["max_score"] for r in results if r.get("max_score"))
    failed = any(r["status"] in ("fail", "error") for r in results)
    return {"points": total, "max": maximum, "failed": failed, "results": results}


def github_outputs(path: Path) -> dict[str, str]:
    """Parse a $GITHUB_OUTPUT file: `name=value` lines and `name<<DELIM` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        name, _, value = line.partition("=")
        out[name] = value
        i += 1
    return out


@pytest.mark.parametrize("reference", [True, False], ids=["reference", "blank"])
def test_reporter_consumes_what_the_grading_step_writes(tmp_path: Path, reference: bool):
    repo = tmp_path / "repo"
    release.release_module(FIXTURE, repo)
    if reference:
        copy_reference_back(repo)
    workflow = load(repo / ".github/workflows/classroom.yml")
    grade, _, _ = grade_and_reporter(workflow)
    command = next(line for line in grade["run"].splitlines() if re.search(r"\bpytest\b", line))
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "pytest"]
    github_output = tmp_path / "github_output"
    github_output.write_text("")
    proc, doc = run_course(repo, *args[3:], env={"GITHUB_OUTPUT": str(github_output)})
    outputs = github_outputs(github_output)
    assert set(outputs) == {"result"}, outputs
    seen = reporter_emulation({grade["id"]: outputs["result"]}, workflow)
    (result,) = seen["results"]
    assert result["version"] == 1 and len(result["tests"]) == 2
    for test in result["tests"]:
        assert {"name", "status", "score", "message"} <= set(test)
        assert test["status"] in ("pass", "fail", "error")
    assert seen["max"] == 20
    if reference:
        assert (seen["points"], seen["failed"], result["status"]) == (20, False, "pass")
    else:
        assert (seen["points"], seen["failed"], result["status"]) == (0, True, "fail")
        assert all("NotImplementedError" in t["message"] for t in result["tests"])
    assert seen["points"] == doc["summary"]["score"]


def test_template_repo_has_no_stray_files():
    files = sorted(p.relative_to(TEMPLATE).as_posix() for p in TEMPLATE.rglob("*") if p.is_file())
    assert files == [".gitattributes", ".github/workflows/classroom.yml", ".gitignore", "README.md",
                     "instructor/README.md", "instructor/classroom-gpu.yml"]


def test_plugin_url_pins_the_requirement(tmp_path: Path):
    from pytest_hpccourse.authoring.release import pin_plugin

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["numpy>=1.26", "pytest-hpccourse[cuda]>=0.1"]\n'
                         '[project.optional-dependencies]\ngpu = ["pytest-hpccourse[gpu]"]\n')
    assert pin_plugin(pyproject, "git+https://example.org/pytest-hpccourse@v0.1.0") == 2
    text = pyproject.read_text()
    assert '"pytest-hpccourse[cuda] @ git+https://example.org/pytest-hpccourse@v0.1.0"' in text
    assert '"pytest-hpccourse[gpu] @ git+https://example.org/pytest-hpccourse@v0.1.0"' in text
    assert '"numpy>=1.26"' in text


def test_a_release_pins_the_plugin_releases_compatible_with_its_own(tmp_path: Path):
    from pytest_hpccourse.authoring.release import compatible_range, pin_plugin

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["numpy>=1.26", "pytest-hpccourse[cuda]>=0.1", "pytest-hpccourse"]\n')
    assert pin_plugin(pyproject, version="0.3.2") == 2
    text = pyproject.read_text()
    assert '"pytest-hpccourse[cuda]>=0.3,<1"' in text and '"pytest-hpccourse>=0.3,<1"' in text
    assert '"numpy>=1.26"' in text
    assert compatible_range("1.4.0") == ">=1.4,<2"
    assert compatible_range("2.0") == ">=2.0,<3"
    # a build between tags names itself (pip then accepts that pre-release), without the local "+g<hash>" part
    assert compatible_range("0.1.1.dev3+g1234abc") == ">=0.1.1.dev3,<1"
    assert compatible_range("1.0.0rc1") == ">=1.0.0rc1,<2"


def test_every_lesson_round_trips_through_the_release_writer():
    """What release writes (the released lesson.toml, the keys) reads back equal, for every lesson of the course."""
    for path in sorted((REPO / "modules").rglob("lesson.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        released, keys = release.split_keys(data, path)
        for doc in (released, keys):
            assert tomllib.loads(release.toml_text(doc)) == doc, path
