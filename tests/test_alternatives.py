"""Different-but-correct solutions: `[[alternatives]]` proven by `hpccourse check`, the README's
"also right" claims that need one, and `hpccourse attack` grading learner-style variants."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from pytest_hpccourse.authoring import attack, audit, check, release
from pytest_hpccourse.grading import manifest

REPO = Path(__file__).resolve().parent.parent
DEMO = Path(__file__).resolve().parent / "fixtures" / "release" / "modules" / "00-demo"

# the demo lesson's loop, written another way: the same result for every n, so full points
SLICES = '''[[alternatives]]
file = "axpy.py"
find = "for start in range(0, n, BLOCK):"
replace = "for start in [i * BLOCK for i in range(-(-n // BLOCK))]:"
why = "block starts from a ceil-divided block count"
'''
# "also right" in name only: it drops the last partial block
BROKEN = SLICES.replace("range(-(-n // BLOCK))", "range(n // BLOCK)").replace(
    "block starts from a ceil-divided block count", "floor-divided block count")


@pytest.fixture
def lesson(tmp_path: Path) -> Path:
    module = tmp_path / "course" / "modules" / "00-demo"
    shutil.copytree(DEMO, module, ignore=shutil.ignore_patterns("02-scan"))
    shutil.copyfile(REPO / "scoring.toml", tmp_path / "course" / "scoring.toml")
    return module / "01-axpy"


def add_to_manifest(lesson: Path, text: str) -> None:
    toml = lesson / "lesson.toml"
    head, tail = toml.read_text(encoding="utf-8").split("[[questions]]", 1)
    toml.write_text(head + text + "\n[[questions]]" + tail, encoding="utf-8")


def run(main, *args: str) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(list(args))
    return rc, buf.getvalue()


def test_manifest_reads_alternatives_like_mutants(lesson: Path):
    add_to_manifest(lesson, SLICES)
    alt = manifest.load_lesson(lesson).alternatives
    assert [(a.file, a.count, a.why) for a in alt] == [("axpy.py", 1, "block starts from a ceil-divided block count")]
    add_to_manifest(lesson, '[[alternatives]]\nfile = "other.py"\nfind = "a"\nreplace = "b"\nwhy = "x"\n')
    with pytest.raises(manifest.ManifestError, match=r"alternatives\[1\]\.file"):
        manifest.load_lesson(lesson)


def test_check_proves_a_correct_alternative_and_refuses_one_that_loses_points(lesson: Path, tmp_path: Path):
    add_to_manifest(lesson, SLICES)
    rc, out = run(check.main, str(lesson), "-j", "1", "--json", str(tmp_path / "a.json"))
    assert rc == 0, out
    [res] = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    assert res["verdict"] == "SOUND"
    assert [(a["result"], a["detail"]) for a in res["alternatives"]] == [("kept", "code 4/4")]
    assert "alternative 1 (block starts from a ceil-divided block count): code 4/4" in out

    toml = lesson / "lesson.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace(SLICES, BROKEN), encoding="utf-8")
    rc, out = run(check.main, str(lesson), "-j", "1", "--json", str(tmp_path / "b.json"))
    [res] = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))
    assert rc == 1 and res["verdict"] == "UNSOUND"
    assert res["reasons"][0].startswith("alternative 1 (floor-divided block count) loses points: code ")
    assert "first loss: test_axpy.py::" in res["reasons"][0]


def test_an_alternative_outside_the_solution_region_is_refused(lesson: Path):
    add_to_manifest(lesson, '[[alternatives]]\nfile = "axpy.py"\nfind = "BLOCK = 256"\n'
                            'replace = "BLOCK = 128"\nwhy = "smaller blocks"\n')
    reasons = audit.mutant_reasons(manifest.load_lesson(lesson))
    assert reasons == ["alternative 1 (smaller blocks) edits axpy.py:5 outside every solution region: "
                       "an alternative must change what the learner writes"]


@pytest.mark.parametrize("claim", ["用 while 循环也对。", "两种写法测试都接受。", "另一种同样正确的做法是分两遍。",
                                   "Either order is also right."])
def test_a_readme_claiming_another_approach_is_right_needs_an_alternative(lesson: Path, claim: str):
    readme = lesson / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\n" + claim + "\n", encoding="utf-8")
    [reason] = audit.alternative_reasons(manifest.load_lesson(lesson))
    assert "says another approach is also right" in reason and "has no [[alternatives]]" in reason
    add_to_manifest(lesson, SLICES)
    assert audit.alternative_reasons(manifest.load_lesson(lesson)) == []


def test_release_leaves_alternatives_out(lesson: Path, tmp_path: Path):
    add_to_manifest(lesson, SLICES)
    out = tmp_path / "student"
    release.release_module(lesson.parent, out, keys=True, template=tmp_path / "none")
    released = (out / "01-axpy" / "lesson.toml").read_text(encoding="utf-8")
    assert "alternatives" not in released.split("\n", 1)[1] and "ceil-divided" not in released


def test_attack_grades_each_variant_and_flags_misgrades(lesson: Path, tmp_path: Path):
    variants = tmp_path / "v.toml"
    variants.write_text('''
[[wrong]]
name = "no-scale"
why = "forgets alpha"
file = "axpy.py"
find = "alpha * x[start:stop]"
replace = "x[start:stop]"

[[wrong]]
name = "harmless"
why = "not a bug at all: stop clamped twice"
file = "axpy.py"
find = "stop = min(start + BLOCK, n)"
replace = "stop = min(min(start + BLOCK, n), n)"

[[correct]]
name = "slices"
why = "ceil-divided block count"
edits = [{file = "axpy.py", find = "for start in range(0, n, BLOCK):", replace = "for start in [i * BLOCK for i in range(-(-n // BLOCK))]:"}]

[[correct]]
name = "missing"
why = "find text absent"
file = "axpy.py"
find = "no such line"
replace = "x"
''', encoding="utf-8")
    before = (lesson / "axpy.py").read_text(encoding="utf-8")
    rc, out = run(attack.main, str(lesson), str(variants), "-j", "2", "--json", str(tmp_path / "r.json"))
    assert (lesson / "axpy.py").read_text(encoding="utf-8") == before  # graded in copies
    rows = {r["name"]: r for r in json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["variants"]}
    assert rc == 1
    assert rows["no-scale"]["verdict"] == "ok" and rows["no-scale"]["code"] != "4/4"
    assert (rows["harmless"]["verdict"], rows["harmless"]["code"]) == ("MISGRADE", "4/4")
    assert (rows["slices"]["verdict"], rows["slices"]["code"]) == ("ok", "4/4")
    assert rows["missing"]["verdict"] == "error" and "occurs 0 time(s)" in rows["missing"]["detail"]
    assert "demo-01: 4 variant(s), 1 MISGRADE, 1 error, 0 unproven" in out


@pytest.mark.parametrize("text, message", [
    ("", "no [[wrong]] or [[correct]] variant"),
    ("[[right]]\nwhy = 'x'\n", "unknown table(s) ['right']"),
    ('[[wrong]]\nfile = "axpy.py"\nfind = "a"\nreplace = "b"\n', "`why`"),
    ('[[wrong]]\nwhy = "w"\nfile = "other.py"\nfind = "a"\nreplace = "b"\n', "is not one of the lesson's files"),
    ('[[correct]]\nwhy = "w"\nedits = []\n', "edits: must be a non-empty list"),
])
def test_attack_refuses_malformed_variant_files(lesson: Path, tmp_path: Path, capsys, text: str, message: str):
    variants = tmp_path / "v.toml"
    variants.write_text(text, encoding="utf-8")
    assert attack.main([str(lesson), str(variants)]) == 2
    assert message in capsys.readouterr().err
