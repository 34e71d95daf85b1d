"""The static rules of `hpccourse check` (pytest_hpccourse/authoring/audit.py): each planted lesson under
tests/fixtures/audit breaks one rule and gets exactly its reason; the demo module breaks none.
No pytest run is needed: these rules read the files only."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_hpccourse.authoring import audit, check
from pytest_hpccourse.grading import answers, formula, manifest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PLANTED = FIXTURES / "audit"
RULES = PLANTED / "10-rules"
GUESSABLE = PLANTED / "20-guessable"
DEMO = FIXTURES / "release" / "modules" / "00-demo"

SOFTMAX_MERGE = "l1*exp(m1 - max(m1, m2)) + l2*exp(m2 - max(m1, m2))"


def lesson(folder: Path) -> manifest.Lesson:
    return manifest.load_lesson(folder)


def static_check(*paths: Path, tmp_path: Path) -> tuple[int, str, dict[str, dict]]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = check.main([*map(str, paths), "--static", "-j", "1", "--json", str(tmp_path / "c.json")])
    results = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))
    return rc, buf.getvalue(), {r["id"]: r for r in results}


# ---- 1. formula keys ------------------------------------------------------------------------

def test_a_key_that_overflows_at_the_graders_points_is_rejected():
    q1 = lesson(RULES / "01-formula").questions[0]
    assert audit.formula_reasons(q1, 24) == [
        ("Q1: the formula key cannot be evaluated at the grader's point n=963.1 (exp() failed: math "
         "range error); set `domain` so that every sample point is valid")]


def test_a_key_whose_equivalent_form_the_grader_rejects_is_reported_with_the_graders_message():
    q3 = lesson(RULES / "01-formula").questions[2]
    assert audit.formula_reasons(q3, 24) == [
        ("Q3: the grader rejects `l1 * (exp(m1) / exp(max(m1, m2))) + l2 * (exp(m2) / exp(max(m1, m2)))`, "
         "an equivalent form of the key (exp(a-b) -> exp(a)/exp(b)): cannot evaluate at m1=951.5, "
         "l1=2.562, m2=4.619, l2=2.45: exp() failed: math range error (+2 more rewrite(s) rejected)")]
    # the fix the lesson needs: a domain where exp cannot overflow (cuda-07 uses [0.5, 20])
    assert audit.formula_reasons(replace(q3, domain=(0.5, 20.0)), 24) == []


def test_the_rule_works_without_sympy(monkeypatch):
    monkeypatch.setattr(audit, "_sympy", lambda: None)
    q3 = lesson(RULES / "01-formula").questions[2]
    forms = dict(audit.formula_rewrites(q3.answer, q3.variables))
    assert "sympy.expand" not in forms
    [reason] = audit.formula_reasons(q3, 24)
    assert "(exp(a-b) -> exp(a)/exp(b)): cannot evaluate at m1=951.5" in reason
    assert "more rewrite" not in reason  # expand and factor were the other two


def test_rewrites_are_equivalent_forms_within_the_graders_limits():
    forms = dict(audit.formula_rewrites("s*b*h*(34 + 5*a*s/h)", ["s", "b", "h", "a"]))
    assert forms["(key)*1"] == "(s*b*h*(34 + 5*a*s/h))*1"
    assert forms["(key)+0"] == "(s*b*h*(34 + 5*a*s/h))+0"
    assert forms["1*(key)"] == "1*(s*b*h*(34 + 5*a*s/h))"
    assert forms["top-level operands swapped"] == "(34 + 5 * a * s / h) * (s * b * h)"
    assert forms["a/b -> a*(1/b)"] == "s * b * h * (34 + 5 * a * s * (1 / h))"
    assert forms["products distributed over sums"] == "s * b * h * 34 + s * b * h * (5 * a * s / h)"
    if audit._sympy() is not None:
        assert forms["sympy.expand"] == "5*a*b*s**2 + 34*b*h*s"
    assert dict(audit.formula_rewrites("a - b", ["a", "b"]))["top-level operands swapped"] == "-b + a"
    assert dict(audit.formula_rewrites("exp(-a)", ["a"]))["exp(a-b) -> exp(a)/exp(b)"] == "1 / exp(a)"


def test_floor_and_ceil_arguments_are_never_rewritten():
    # n/49 and n*(1/49) round differently at n = 49: not an equivalent answer in floating point
    forms = dict(audit.formula_rewrites("floor(n/49) + n/2", ["n"]))
    assert forms["a/b -> a*(1/b)"] == "floor(n / 49) + n * (1 / 2)"
    assert "sympy.expand" not in forms
    q = manifest.Question(id="Q1", kind="formula", prompt="p", answer="ceil(n/49)*4 + n//3",
                          variables=("n",), domain=(1.0, 5000.0), rel_tol=1e-6)
    assert audit.formula_reasons(q, 24) == []


def test_grader_points_are_the_points_the_grader_compares_at(monkeypatch):
    q = replace(lesson(RULES / "01-formula").questions[2], domain=(0.5, 20.0))
    learner = SOFTMAX_MERGE.replace("l1*", "(l1)*")
    seen: list[dict[str, float]] = []
    call = formula.Expression.__call__

    def spy(self: formula.Expression, values: dict[str, float]) -> float:
        if self.source == learner:
            seen.append(dict(values))
        return call(self, values)

    monkeypatch.setattr(formula.Expression, "__call__", spy)
    assert answers.grade(q, True, learner, 2.0, formula_points=24).status == "PASS"
    assert seen == list(audit.grader_points(q, 24))
    assert len(seen) == 24 and all(v == round(v) for point in seen[1::2] for v in point.values())


# ---- 4. mutants inside solution regions -----------------------------------------------------

def test_mutants_outside_the_solution_region_are_rejected():
    assert audit.mutant_reasons(lesson(RULES / "02-mutant")) == [
        ("mutant 2 (returns the input (given code, not the learner's)) edits kernel.py:8 outside every "
         "solution region: a mutant must change what the learner writes"),
        ("mutant 3 (renames across the region boundary) edits kernel.py:3 outside every solution region, "
         "2 of 3 occurrences: a mutant must change what the learner writes"),
    ]


@pytest.mark.parametrize("find, inside", [
    ("\n    for v in xs:\n", True),  # from the line break after BEGIN (the demo-02 style)
    ("out.append(factor * v)\n    ", True),  # up to the END marker's indentation
    ("### BEGIN SOLUTION\n    for v in xs:", False),  # the marker itself
    ("factor * v)\n    ### END", False),
    ("out = []\n    ### BEGIN SOLUTION\n    for v in xs:", False),
])
def test_a_mutant_span_must_lie_between_the_markers(tmp_path: Path, find: str, inside: bool):
    folder = tmp_path / "m" / "01-x"
    shutil.copytree(RULES / "02-mutant", folder)
    toml = folder / "lesson.toml"
    head, _, _ = toml.read_text(encoding="utf-8").partition("[[mutants]]")
    questions = "[[questions]]" + toml.read_text(encoding="utf-8").split("[[questions]]", 1)[1]
    toml.write_text(head + f"[[mutants]]\nfile = \"kernel.py\"\nfind = {json.dumps(find)}\n"
                    f"replace = \"\"\ncount = 1\nwhy = \"w\"\n\n" + questions, encoding="utf-8")
    assert (audit.mutant_reasons(lesson(folder)) == []) is inside


# ---- 5. hints that hand out the solution ----------------------------------------------------

def test_a_readme_that_quotes_two_solution_lines_is_rejected():
    assert audit.hint_reasons(lesson(RULES / "03-hint")) == [
        ("README.md:8 copies two consecutive lines of the solution region kernel.py:4-7: "
         "'for v in xs:' / 'out.append(factor * v)'; hints state invariants and shapes, not code")]


@pytest.mark.parametrize("readme, leaks", [
    ("- 写 `for v in xs:` `out.append(factor*v)`\n", True),  # inline code in prose, spacing differs
    ("- 写 `for v in xs:` 然后 `out.append(factor*v)`\n", False),  # words between: not consecutive
    ("```\nfor v in xs:\n\n    # append the product\n    out.append(factor * v)  # x\n```\n", True),
    ("- 循环头是 `for v in xs:`。\n- 循环体只有一行。\n- 追加 `out.append(factor * v)`。\n", False),
    ("- 输出与输入等长，第 i 个元素是 factor 乘第 i 个输入。\n", False),
])
def test_hint_rule_matches_code_not_layout(tmp_path: Path, readme: str, leaks: bool):
    folder = tmp_path / "01-x"
    shutil.copytree(RULES / "03-hint", folder)
    (folder / "README.md").write_text(readme, encoding="utf-8")
    assert bool(audit.hint_reasons(lesson(folder))) is leaks


@pytest.mark.parametrize("line, trivial", [
    ("", True), ("   }", True), ("});", True), ("// the loop", True), ("# the loop", True),
    ("## 提示", True), ("i += 1;", True), ("acc = 0;  // reset", True), ("acc = 0.0f;", False),
    ("__syncthreads();", False), ("#pragma unroll 4", False), ("out.append(factor * v)", False),
])
def test_trivial_lines(line: str, trivial: bool):
    assert audit.is_trivial(line) is trivial


# ---- 2. guessable choices per module --------------------------------------------------------

def test_a_module_with_guessable_keys_fails_with_its_distribution():
    course = audit.audit_course([lesson(d) for d in sorted(GUESSABLE.iterdir())])
    [stats] = course.modules
    assert stats.line() == ("module 20-guessable: choice keys A0 B3 C0 D0 (of 3); multi keys A3 B0 C3 D0 "
                            "(of 3); keyed option longest in 6/6: UNSOUND")
    expected = [
        "module 20-guessable: B is the key of 3 of 3 choice questions (100% > 50%)",
        "module 20-guessable: A is keyed in 3 of 3 multi questions (100% > 80%)",
        "module 20-guessable: the keyed option is the longest in 6 of 6 choice/multi questions (100% > 60%)",
    ]
    assert list(course.reasons.values()) == [expected] * 3


def _choice(key: str, options: tuple[str, ...] = ("A. xx", "B. xx", "C. xx", "D. xx"),
            kind: str = "choice") -> manifest.Question:
    return manifest.Question(id="Q1", kind=kind, prompt="p", options=options,
                             answer=key if kind == "choice" else sorted(key))


@pytest.mark.parametrize("keys, problems", [
    ("BB", 0),  # fewer than 3 choice questions: no letter rule
    ("BBAC", 0),  # 50 % is not > 50 %
    ("BBA", 1),  # 67 %
])
def test_choice_letter_threshold(keys: str, problems: int):
    stats = audit.ModuleStats("m")
    for k in keys:
        stats.add(_choice(k))
    assert len(stats.problems()) == problems


@pytest.mark.parametrize("keys, problems", [
    (["AB", "AC"], 0),  # fewer than 3 multi questions
    (["AB", "AC", "AD", "AB", "BC"], 0),  # A in 4 of 5 = 80 %: not > 80 %
    (["AB", "AC", "AD", "AB", "AC", "BC"], 1),  # 5 of 6
])
def test_multi_letter_threshold(keys: list[str], problems: int):
    stats = audit.ModuleStats("m")
    for k in keys:
        stats.add(_choice(k, kind="multi"))
    assert len(stats.problems()) == problems


def test_longest_option_counts_only_a_strictly_longest_keyed_option():
    assert audit.keyed_is_longest(_choice("B", ("A. 短", "B. 长一点", "C. 短")))
    assert not audit.keyed_is_longest(_choice("B", ("A. 一样长", "B. 一样长", "C. 短")))  # a tie
    assert not audit.keyed_is_longest(_choice("A", ("A. 短", "B. 长一点")))
    assert audit.keyed_is_longest(_choice("AC", ("A. 短", "B. 短", "C. 长一点"), kind="multi"))
    assert audit.option_text("B．  显存带宽 ") == "显存带宽"
    stats = audit.ModuleStats("m")
    for key in "ABC":  # 3 of 5 = 60 %: passes; a fourth would fail
        stats.add(_choice(key, ("A. a", "B. b", "C. c", "D. d")))
        stats.add(_choice(key, ("A. a", "B. b", "C. c", "D. d")[:"ABC".index(key)]
                          + (f"{key}. longest",) + ("A. a", "B. b", "C. c", "D. d")["ABC".index(key) + 1:]))
    assert stats.longest == 3 and stats.choice == 6 and stats.problems() == []


# ---- 3. duplicate prompts -------------------------------------------------------------------

def test_duplicate_prompts_fail_both_lessons():
    course = audit.audit_course([lesson(d) for d in sorted(RULES.iterdir())])
    f, d = (RULES / "01-formula").resolve(), (RULES / "04-duplicate").resolve()
    assert course.reasons[f] == [
        f"Q2: same prompt as rules-04 Q1 ({manifest.display_path(d)}) (after normalising)",
        f"Q3: same formula key as rules-04 Q3 ({manifest.display_path(d)}) up to the names of its variables",
    ]
    assert course.reasons[d] == [
        f"Q1: same prompt as rules-01 Q2 ({manifest.display_path(f)}) (after normalising)",
        f"Q3: same formula key as rules-01 Q3 ({manifest.display_path(f)}) up to the names of its variables",
    ]
    assert course.modules[0].problems() == []  # the module's keys are spread


def test_short_formula_keys_may_recur_and_long_ones_are_compared_by_position_and_name():
    def q(answer: str, variables: tuple[str, ...]) -> manifest.Question:
        return manifest.Question(id="Q1", kind="formula", prompt="p", answer=answer, variables=variables)

    assert audit.formula_fingerprints(q("3*n*b", ("n", "b"))) == []
    long_key = q("2*(N-1)*alpha + 2*(N-1)/N*S/B", ("N", "S", "alpha", "B"))
    renamed = q("2*(p-1)*a + 2*(p-1)/p*s/bw", ("p", "s", "a", "bw"))  # same formula, other names
    other = q("2*(N-1)*alpha + (N-1)/N*S/B", ("N", "S", "alpha", "B"))
    assert set(audit.formula_fingerprints(long_key)) & set(audit.formula_fingerprints(renamed))
    assert not set(audit.formula_fingerprints(long_key)) & set(audit.formula_fingerprints(other))


def test_normalize_prompt():
    assert audit.normalize_prompt("  Which bound？（Memory  or\ncompute）") == \
        audit.normalize_prompt("which BOUND?(memory or compute)") == "whichboundmemoryorcompute"
    assert audit.normalize_prompt("１ KiB 是多少字节？") == "1kib是多少字节"
    assert audit.normalize_prompt("2^10 字节") != audit.normalize_prompt("2^20 字节")


# ---- through `hpccourse check` --------------------------------------------------------------

def test_check_reports_every_static_rule_before_any_run(tmp_path: Path):
    rc, out, results = static_check(PLANTED, tmp_path=tmp_path)
    assert rc == 1
    reasons = {lid: r["reasons"] for lid, r in results.items()}
    assert [r.split(":")[0] for r in reasons["rules-01"]] == ["Q1", "Q3", "Q2", "Q3"]
    assert reasons["rules-02"][0].startswith("mutant 2 (returns the input")
    assert reasons["rules-03"][0].startswith("README.md:8 copies two consecutive lines")
    assert reasons["rules-04"][0].startswith("Q1: same prompt as rules-01 Q2")
    assert all(len(reasons[f"guess-0{i}"]) == 3 for i in (1, 2, 3))
    assert {r["verdict"] for r in results.values()} == {"UNSOUND"}
    assert "module 10-rules: choice keys A1 B1 C1 D1 (of 4); multi keys - (of 0); keyed option longest " \
           "in 0/4: ok" in out
    assert "module 20-guessable: choice keys A0 B3 C0 D0 (of 3)" in out


def test_a_lesson_checked_alone_is_compared_with_its_module(tmp_path: Path):
    rc, _, results = static_check(RULES / "04-duplicate", tmp_path=tmp_path)
    assert rc == 1 and list(results) == ["rules-04"]
    assert results["rules-04"]["reasons"][0].startswith("Q1: same prompt as rules-01 Q2")


def test_the_demo_module_passes_every_static_rule(tmp_path: Path):
    rc, out, results = static_check(DEMO, tmp_path=tmp_path)
    assert rc == 0, out
    assert {lid: r["reasons"] for lid, r in results.items()} == {"demo-01": [], "demo-02": []}
    assert {r["verdict"] for r in results.values()} == {"UNPROVEN"}  # --static proves nothing more
    assert "module 00-demo: choice keys A0 B1 C0 D0 (of 1); multi keys A1 B0 C1 D0 (of 1); " \
           "keyed option longest in 0/2: ok" in out
