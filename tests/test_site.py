"""The course site: data files, generated pages, both built editions, and the notebooks.

The learner edition must hold no answer key, no explanation and no reference line: the leak test
searches every text file of the built learner site for each of them, and proves it can fail by
finding them in the reference edition.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_hpccourse.authoring import regions, release
from pytest_hpccourse.grading import formula, manifest
from pytest_hpccourse.site import builder, notebook, sitedata, sitepages

pytestmark = pytest.mark.xdist_group("site")
REPO = Path(__file__).resolve().parents[1]
ROOT = Path(os.environ.get("HPCCOURSE_SITE_TEST_ROOT", REPO))  # a course root to build (default: this repo)
TEXT_SUFFIXES = {".html", ".json", ".ipynb", ".xml", ".txt", ".md", ".js"}
VENDOR_DIR = "assets/vendor"


@pytest.fixture(scope="session")
def course() -> sitepages.Course:
    return sitepages.read_course(ROOT)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both editions, built once for this session (the build time is asserted too)."""
    out = {}
    for edition in sitepages.EDITIONS:
        base = tmp_path_factory.mktemp(f"site-{edition}")
        start = time.perf_counter()
        out[edition] = builder.build(ROOT, edition, base / "out", work=base / "src")
        elapsed = time.perf_counter() - start
        assert elapsed < 60, f"building the {edition} edition took {elapsed:.0f} s (budget 60 s on 2 cores)"
    return out


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _plain(line: str) -> str:
    """A Markdown line as its rendered text reads: list marks, emphasis, code marks and headings gone."""
    line = re.sub(r"^\s*(?:[-*+]|\d+[.)]|#+|>)\s+", "", line)
    line = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line)
    return _squash(line.replace("*", "").replace("`", ""))


def _site_text(folder: Path) -> str:
    """Every text file of a built site (vendor libraries aside), tags stripped, entities decoded,
    whitespace removed, so a line of code matches however the highlighter split it."""
    chunks = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        if VENDOR_DIR in path.relative_to(folder).as_posix():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix in (".json", ".ipynb"):
            text = json.dumps(json.loads(text), ensure_ascii=False) if path.suffix == ".ipynb" else text
            text = text.encode().decode("unicode_escape", errors="ignore") if "\\u" in text else text
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
        chunks.append(_squash(text))
    return "\n".join(chunks)


def _public_text(course: sitepages.Course) -> str:
    """What a learner may see anywhere in the course: READMEs, prompts, options, the blanks, the answers
    templates, the tests, the site's own topic pages (a line of one lesson's solution may well be
    public in another lesson)."""
    parts = [m.readme for m in course.modules]
    parts += [sitepages.home_page(course), sitepages.cheatsheet_page(course), sitepages.system_design_page(course)]
    parts += [(ROOT / p).read_text(encoding="utf-8") for p in sitepages.link_targets(course)
              if p.endswith(".md") and not p.startswith("modules/")]
    for src in course.lessons():
        lesson = src.lesson
        parts += [src.readme, release.answers_template(manifest.read_raw(lesson.dir))]
        parts += [f.blank for f in src.code]
        for q in lesson.questions:
            parts += [q.prompt, *q.options]
        for f in sorted(lesson.dir.iterdir()):
            if f.is_file() and f.name.startswith("test_"):
                parts.append(f.read_text(encoding="utf-8"))
    return _squash("\n".join(parts))


def _key_marker(q: manifest.Question) -> str:
    """How a key reads on a built page: "答案：" and the key, Markdown code marks gone."""
    return _squash("答案：" + sitepages.key_text(q).replace("`", ""))


def _secrets(course: sitepages.Course) -> list[tuple[str, str]]:
    """(what, squashed text) for every key, explanation line and reference line a learner must not see."""
    out = []
    public = _public_text(course)
    for src in course.lessons():
        for q in src.lesson.questions:
            out.append((f"{src.lesson.id} {q.id} key", _key_marker(q)))
            for line in q.explanation.splitlines():
                s = _plain(line)
                if len(s) >= 12 and s not in public:
                    out.append((f"{src.lesson.id} {q.id} explanation", s))
        for f in src.code:
            for region in regions.find_regions(f.reference, f.name):
                body = f.reference.splitlines()[region.begin:region.end - 1]
                for line in body:
                    s = _squash(line)
                    if len(s) >= 12 and s not in public and not s.startswith(("//", "#")):
                        out.append((f"{src.lesson.id} {f.name} solution line", s))
    return out


# ---- data files ---------------------------------------------------------------------------------
def test_plan_matches_the_tree(course: sitepages.Course) -> None:
    assert len(course.modules) == 12
    assert sum(len(m.plan.lessons) for m in course.modules) == 111  # 108 + module 12's three capstones
    ids = [lesson.id for m in course.modules for lesson in m.plan.lessons]
    assert len(ids) == len(set(ids))
    on_disk = {p.name for p in (ROOT / "modules").iterdir() if (p / "pyproject.toml").is_file()}
    assert on_disk <= {m.plan.dir for m in course.modules}, "a module folder the plan does not know"
    for m in course.modules:
        planned = {p.id for p in m.plan.lessons}
        for src in m.lessons:
            assert src.lesson.id in planned, f"{src.lesson.id} is built but not in site/plan.toml"
    assert sum(len(m.lessons) for m in course.modules) == len(list(manifest.iter_lesson_dirs([ROOT / "modules"])))


def test_every_worked_number_comes_from_its_formula(course: sitepages.Course) -> None:
    cs = course.cheatsheet
    assert len(cs.formulas) >= 12
    for f in cs.formulas:
        raw = formula.compile_expression(f.expr, [v.name for v in f.variables])(f.example.values)
        data = _cheatsheet_entry(f.id)
        scale = data["example"].get("scale", 1)
        assert math.isclose(raw / scale, f.example.value, rel_tol=1e-12)
        assert math.isclose(f.example.value, data["example"]["expect"], rel_tol=sitedata.EXPECT_REL_TOL)
    topics = {"memory", "collectives", "compute", "roofline", "inference"}
    assert topics <= {s.id for s in cs.sections}


def _cheatsheet_entry(fid: str) -> dict:
    import tomllib

    data = tomllib.loads((ROOT / "site" / sitedata.CHEATSHEET).read_text(encoding="utf-8"))
    return next(f for f in data["formula"] if f["id"] == fid)


def test_graded_by_names_real_objective_questions(course: sitepages.Course) -> None:
    graded = 0
    for f in course.cheatsheet.formulas:
        for lesson_id, qid in f.graded_by:
            src = course.lesson(lesson_id)
            assert src is not None, f"{f.id}: {lesson_id} is not built"
            q = next(q for q in src.lesson.questions if q.id == qid)
            assert q.kind in ("formula", "numeric"), f"{f.id}: {lesson_id}/{qid} is a {q.kind} question"
            graded += 1
    assert graded >= 5
    page = sitepages.cheatsheet_page(course)
    missing = [f for f in course.cheatsheet.formulas if not f.graded_by]
    assert "尚无评分题目的公式" in page and all(f"](#{f.id})" in page for f in missing)


def test_capacity_tables_evaluate_in_order(course: sitepages.Course) -> None:
    sd = course.system_design
    assert len(sd.steps) == 4 and len(sd.cases) == 3
    for case in sd.cases:
        values: dict[str, float] = {}
        for row in case.capacity:
            values[row.name] = formula.compile_expression(row.expr, list(values))(values)
        assert len(case.capacity) >= 6 and sum(not r.is_input for r in case.capacity) >= 4, case.id
        assert case.diagram.lstrip().startswith(("flowchart", "graph"))


@pytest.mark.parametrize("edit", ["expect", "expr"])
def test_a_wrong_worked_number_is_an_error(tmp_path: Path, edit: str) -> None:
    text = (ROOT / "site" / sitedata.CHEATSHEET).read_text(encoding="utf-8")
    if edit == "expect":  # a worked number its formula does not give
        text = re.sub(r"^expect = ([-+\d.eE_]+)", lambda m: f"expect = {float(m.group(1)) * 1.01!r}", text,
                      count=1, flags=re.M)
    else:  # an expression over a name that is not declared
        text = re.sub(r'^expr = "', 'expr = "nope + ', text, count=1, flags=re.M)
    path = tmp_path / sitedata.CHEATSHEET
    path.write_text(text, encoding="utf-8")
    with pytest.raises(sitedata.SiteDataError, match="formula"):
        sitedata.load_cheatsheet(path)


def test_format_number() -> None:
    assert sitedata.format_number(1120.0) == "1,120"
    assert sitedata.format_number(16384) == "16,384"
    assert sitedata.format_number(9.87654) == "9.877"
    assert sitedata.format_number(45678.9) == "45,680"
    assert sitedata.format_number(1.12e12) == "1.12×10<sup>12</sup>"
    assert sitedata.format_number(2.5e-7) == "2.5×10<sup>-7</sup>"


# ---- pages --------------------------------------------------------------------------------------
def test_rewrite_links() -> None:
    targets = {"docs/hardware.md": "hardware.md", "modules/02-cuda/04-warp-shuffle": "modules/02-cuda/04-warp-shuffle.md"}
    page = "modules/02-cuda/04-warp-shuffle.md"
    text = ("see [hw](../../../docs/hardware.md#l2) and [bench](../../../benchmarks/x.py), "
            "[04](../04-warp-shuffle/), [web](https://example.org)\n```\n[keep](../../x.md)\n```")
    out = sitepages.rewrite_links(text, "modules/02-cuda/04-warp-shuffle", page, targets)
    assert "[hw](../../hardware.md#l2)" in out
    assert "bench（`benchmarks/x.py`）" in out
    assert "[04](04-warp-shuffle.md)" in out
    assert "web（`https://example.org`）" in out and "[keep](../../x.md)" in out


def test_home_counts_come_from_the_tree(course: sitepages.Course) -> None:
    home = sitepages.home_page(course)
    built = sum(len(m.lessons) for m in course.modules)
    assert f"目前已上线 {built} 课" in home
    diagram = sitepages.learning_path(course)
    assert len(re.findall(r'^\s+M\d\d\["', diagram, re.M)) == 12
    assert diagram.count("-.->") == 2 and diagram.count("subgraph P") == 6  # six phases (6: system design)
    for m in course.modules:
        assert f"| {len(m.lessons)} / {len(m.plan.lessons)} |" in home


def test_learner_pages_hold_no_key(course: sitepages.Course) -> None:
    learner = "\n".join(sitepages.pages(course, "learner").values())
    reference = "\n".join(sitepages.pages(course, "reference").values())
    for title in (sitepages.REFERENCE_ANSWER_TITLE, sitepages.REFERENCE_CODE_TITLE):
        assert title not in learner and title in reference
    for src in course.lessons():
        for q in src.lesson.questions:
            assert sitepages.answer_block(q) not in learner
            assert sitepages.answer_block(q) in reference


# ---- the built sites ----------------------------------------------------------------------------
def test_both_editions_build(built: dict[str, Path], course: sitepages.Course) -> None:
    for out in built.values():
        assert (out / "index.html").is_file() and (out / "search" / "search_index.json").is_file()
        for src in course.lessons():
            page = out / src.page.removesuffix(".md") / "index.html"
            assert page.is_file(), page
            assert (out / src.notebook).is_file()
        assert (out / "cheatsheet" / "index.html").is_file() and (out / "system-design" / "index.html").is_file()


def test_built_learner_edition_leaks_nothing(built: dict[str, Path], course: sitepages.Course) -> None:
    secrets = _secrets(course)
    assert len(secrets) > 200
    learner, reference = _site_text(built["learner"]), _site_text(built["reference"])
    leaked = [what for what, s in secrets if s in learner]
    assert not leaked, f"{len(leaked)} secrets in the learner site, e.g. {leaked[:5]}"
    found = sum(s in reference for _, s in secrets)
    assert found >= 0.95 * len(secrets), "the search does not find what the reference edition shows"


def test_built_html_references_no_external_host(built: dict[str, Path]) -> None:
    pattern = re.compile(r"""(?:src|href)\s*=\s*["']((?:https?:)?//[^"']+)""", re.I)
    for out in built.values():
        for page in out.rglob("*.html"):
            for url in pattern.findall(page.read_text(encoding="utf-8")):
                pytest.fail(f"{page.relative_to(out)} loads {url}")
        for css in out.rglob("*.css"):
            assert not re.search(r"@import\s+url\(\s*['\"]?https?:", css.read_text(encoding="utf-8")), css


def test_no_raw_math_left_for_the_browser(built: dict[str, Path]) -> None:
    text = (built["learner"] / "cheatsheet" / "index.html").read_text(encoding="utf-8")
    body = re.sub(r"<(pre|code)\b.*?</\1>", "", text, flags=re.S)
    assert body.count('class="arithmatex"') >= 20
    assert "$$" not in re.sub(r"<[^>]+>", "", body)


# ---- notebooks ----------------------------------------------------------------------------------
def _run_notebook(nb_path: Path, folder: Path, tmp_path: Path) -> dict:
    """Do what running all cells does: write each %%writefile cell, then run the last cell's tests."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert code[-1] == notebook.RUN_CELL
    for cell in code[:-1]:
        head, _, body = cell.partition("\n")
        assert head.startswith("%%writefile "), head
        (folder / head.split(maxsplit=1)[1]).write_text(body, encoding="utf-8")
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "pytest", str(folder), "-q", "-p", "no:cacheprovider",
                    "--course-json", str(report), "--course-isolate=off"], cwd=folder, check=False,
                   capture_output=True, timeout=300)
    return json.loads(report.read_text(encoding="utf-8"))["lessons"][0]


@pytest.mark.parametrize("edition", sitepages.EDITIONS)
def test_notebook_round_trip(tmp_path: Path, edition: str) -> None:
    lesson = ROOT / "modules" / "01-train-basics" / "01-memory-ledger"
    copy = tmp_path / "module" / lesson.name
    shutil.copytree(lesson, copy)
    shutil.copy(ROOT / "scoring.toml", tmp_path / "scoring.toml")
    for f in (copy / "answers.yaml", *[copy / name for name in manifest.load_lesson(lesson).files]):
        f.write_text("poisoned: the notebook must write this file\n", encoding="utf-8")
    out = tmp_path / "x.ipynb"
    assert notebook.main([str(lesson), "-o", str(out), "--edition", edition]) == 0
    import nbformat

    nbformat.validate(nbformat.read(out, as_version=4))
    result = _run_notebook(out, copy, tmp_path)
    if edition == "reference":
        assert result["status"] == "PASS" and result["score"] == result["max_score"] == 10
    else:
        assert result["code"]["score"] == 0 and all(q["score"] == 0 for q in result["questions"])



def test_each_system_design_case_links_its_capstone_lesson(course: sitepages.Course):
    page = sitepages.system_design_page(course)
    for case in course.system_design.cases:
        assert case.lesson, f"case {case.id} names no lesson"
        src = course.lesson(case.lesson)
        if src is None:  # planned, not built yet: named, not linked
            assert f"**评分练习：** {case.lesson}（尚未上线）" in page
        else:
            assert f"[{src.lesson.id} {src.lesson.title}]({src.page})" in page, case.id
