"""Tests for rl-09. References: exact enumeration of every k-subset (fractions.Fraction) and exact big-integer
binomials for pass@k; the identity E_c~Binom(n,p)[pass@k] = 1 - (1-p)^k that makes the estimator unbiased;
for the checker, a crafted table of completions (equivalent forms, malformed output, reward-hacking attempts),
random values written in equivalent forms, and a fuzz run against a second, independently written checker in
this file; verl 0.9.1's `math_dapo.last_boxed_only_string` / `remove_boxed` (the field's box extraction) as the
oracle of which box is the answer. Fast tests first; verl's import (~5 s) last."""

from __future__ import annotations

import ast
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

# pass@k in float64: the product of c <= 10^4 factors carries at most c·2^-53 ≈ 1.1e-12 relative rounding, so
# 2e-12 absolute (plus 1e-9 relative for tiny values) holds for the product form with margin; a log-gamma form
# (lgamma(10^4) ≈ 8e4, rounding ~1e-11 that exp carries over) does not.
ATOL, RTOL = 2e-12, 1e-9


def _exact_pass(n: int, c: int, k: int) -> Fraction:
    """1 - C(n-c, k) / C(n, k) with exact integers (C(m, k) = 0 for m < k)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def _enumerated_pass(n: int, c: int, k: int) -> Fraction:
    """Fraction of the k-subsets of n samples (the first c correct) that hold at least one correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(1 for s in subsets if min(s) < c), len(subsets))


def _close(got, want, what):
    assert isinstance(got, float), f"{what}: returned {type(got).__name__}, expected a float"
    want = float(want)
    assert abs(got - want) <= ATOL + RTOL * abs(want), f"{what}: got {got!r}, exact {want!r}"


# ---------------------------------------------------------------- pass@k


def test_pass_at_k_equals_enumeration_of_all_k_subsets(lesson):
    rl = lesson.load("rlvr.py")
    for n in range(1, 10):
        for c in range(n + 1):
            for k in range(1, n + 1):
                want = _enumerated_pass(n, c, k)
                assert want == _exact_pass(n, c, k)
                _close(rl.pass_at_k(n, c, k), want, f"pass_at_k(n={n}, c={c}, k={k})")


def test_pass_at_k_edges_and_invalid_arguments(lesson):
    rl = lesson.load("rlvr.py")
    for n in (1, 2, 7, 100, 10_000):
        assert rl.pass_at_k(n, 0, 1) == 0.0 and rl.pass_at_k(n, 0, n) == 0.0, f"c = 0 must give exactly 0.0 (n={n})"
        assert rl.pass_at_k(n, n, 1) == 1.0, f"c = n must give 1.0 (n={n})"
        assert rl.pass_at_k(n, 1, n) == 1.0, f"k = n with one correct sample: every n-subset holds it (n={n})"
    for n, k in ((5, 2), (40, 7), (10_000, 300)):
        _close(rl.pass_at_k(n, n - k, k), _exact_pass(n, n - k, k), f"n - c == k (n={n}, k={k}): not yet certain")
        assert rl.pass_at_k(n, n - k + 1, k) == 1.0, f"n - c == k - 1 (n={n}, k={k}): every k-subset has a correct one"
    _close(rl.pass_at_k(np.int64(20), np.int64(3), np.int64(4)), _exact_pass(20, 3, 4), "numpy integer arguments")
    for bad in ((5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6), (0, 0, 1)):
        with pytest.raises(ValueError):
            rl.pass_at_k(*bad)


def test_pass_at_k_is_unbiased_over_binomial_correct_counts(lesson):
    """With c ~ Binomial(n, p): E[pass@k estimate] = 1 - (1-p)^k exactly (the plug-in 1 - (1-c/n)^k is not)."""
    rl = lesson.load("rlvr.py")
    for n, p in ((5, 0.3), (12, 0.03), (30, 0.8), (64, 0.125)):
        pmf = [math.comb(n, c) * p**c * (1 - p) ** (n - c) for c in range(n + 1)]
        for k in range(1, n + 1):
            mean = math.fsum(w * rl.pass_at_k(n, c, k) for c, w in enumerate(pmf))
            assert abs(mean - (1 - (1 - p) ** k)) < 1e-12, f"n={n}, p={p}, k={k}: E[estimate] {mean} != {1 - (1 - p) ** k}"


def test_pass_at_k_is_stable_where_binomials_overflow_float(lesson):
    rl = lesson.load("rlvr.py")
    with pytest.raises(OverflowError):  # what the naive ratio meets: C(10000, 5000) has 3009 digits
        float(math.comb(10_000, 5_000))
    n = 10_000
    for c in (1, 2, 7, 100, 2_500, 5_000, 9_000, 9_999):
        for k in (1, 2, 10, 1_000, 4_999, 5_000, 9_000, n - c, n):
            if k <= n:
                _close(rl.pass_at_k(n, c, k), _exact_pass(n, c, k), f"pass_at_k(n={n}, c={c}, k={k})")


def test_estimate_pass_at_k_per_problem(lesson):
    rl = lesson.load("rlvr.py")
    rng = np.random.default_rng(9)
    n = rng.integers(5, 60, size=37)
    c = np.array([rng.integers(0, m + 1) for m in n])
    n_before, c_before = n.copy(), c.copy()
    for k in (1, 3, 5):
        got = rl.estimate_pass_at_k(n, c, k)
        assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (37,)
        want = np.array([float(_exact_pass(int(a), int(b), k)) for a, b in zip(n, c)])
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(rl.estimate_pass_at_k(n, c, k), got)  # no hidden state
    np.testing.assert_array_equal(n, n_before)
    np.testing.assert_array_equal(c, c_before)
    same_n = rl.estimate_pass_at_k(16, np.array([0, 1, 8, 16, 12]), 4)  # one n for all problems (HumanEval's API)
    np.testing.assert_allclose(same_n, [float(_exact_pass(16, x, 4)) for x in (0, 1, 8, 16, 12)], rtol=RTOL, atol=ATOL)
    empty = rl.estimate_pass_at_k(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 1)
    assert empty.shape == (0,) and empty.dtype == np.float64


# ---------------------------------------------------------------- the checker: crafted table


def W(answer: str, think: str = "Let me work it out step by step.") -> str:
    """A well-formed completion whose answer section is `answer`."""
    return f"<think>{think}</think>\nThe answer is {answer}"


BIG = "7" + "0123456789" * 30  # 301 digits: exact, far beyond float's 17

EQUIVALENT = [  # (completion, ground truth, what it shows); every one scores 1.0
    (W(r"\boxed{5}"), "5", "plain integer"),
    (W(r"\boxed{ 5 }"), "5", "spaces around"),
    (W("\\boxed{\n5\t}"), "5", "newline and tab"),
    (W(r"\boxed{5.}"), "5", "one trailing period"),
    (W(r"\boxed{+5}"), "5", "leading +"),
    (W(r"\boxed{5. }"), "5", "the period is dropped after the whitespace is deleted"),
    (W(r"\boxed{+\frac{1}{2}}"), "+1/2", "leading + on \\frac and on a/b"),
    (W(r"\boxed{1,234,567}"), "1234567", "thousands separators"),
    (W(r"\boxed{1234567}"), "1,234,567", "separators in the ground truth"),
    (W(r"\boxed{1 000}"), "1000", "whitespace is deleted, also between digits"),
    (W(r"\boxed{0.5}"), "1/2", "decimal vs a/b"),
    (W(r"\boxed{\frac{1}{2}}"), "0.5", "nested braces: \\frac in the box"),
    (W(r"\boxed{\dfrac{1}{2}}"), "1/2", "\\dfrac"),
    (W(r"\boxed{\tfrac{2}{4}}"), ".5", "\\tfrac, unreduced, and a decimal without integer part"),
    (W(r"\boxed{\frac { 3 } { 4 } }"), "0.75", "spaces inside \\frac"),
    (W(r"\boxed{-\frac{3}{4}}"), "-0.75", "negative \\frac"),
    (W(r"\boxed{-3/4}"), r"-\frac{3}{4}", "negative a/b vs \\frac truth"),
    (W(r"\boxed{10/2}"), "5", "a/b that is an integer"),
    (W(r"\boxed{5.000}"), "5", "trailing zeros"),
    (W(r"\boxed{007}"), "7", "leading zeros"),
    (W(r"\boxed{-0}"), "0", "negative zero"),
    (W(r"\boxed{1,234.5}"), "2469/2", "separators with a decimal part"),
    (W(r"\boxed{-.25}"), "-1/4", "signed decimal without integer part"),
    (W(r"\boxed{5}."), "5", "text after the box"),
    (W(r"\boxed{5}}"), "5", "a stray brace after the box"),
    (W(r"$\boxed{5}$"), "5", "math delimiters outside the box"),
    (W(r"\boxed{3}, no wait: \boxed{5}"), "5", "the last box wins"),
    (W(r"\boxed{5}", think=r"maybe \boxed{4}?"), "5", "a box in the think block is not the answer"),
    ("<think></think>" + r"\boxed{5}", "5", "an empty think block is well formed"),
    (W(r"\boxed{" + BIG + "}"), BIG, "301-digit integer, exact"),
    (W(r"\boxed{\frac{" + BIG + "}{" + BIG + "0}}"), "0.1", "huge fraction, exact"),
]

WRONG_OR_MALFORMED = [  # every one scores 0.0, without an exception
    (W(r"\boxed{6}"), "5", "wrong answer"),
    (W(r"\boxed{5} or maybe \boxed{6}"), "5", "the first box is not the answer"),
    (W("5"), "5", "no box"),
    (W(r"\boxed{}"), "5", "empty box"),
    (W(r"\boxed{   }"), "5", "whitespace-only box"),
    (W(r"\boxed{5"), "5", "truncated: the box never closes"),
    (W(r"\boxed{5} so the final answer is \boxed{"), "5", "truncated last box: no fallback to an earlier one"),
    (W(r"\boxed{\frac{1}{2}"), "1/2", "truncated nested box"),
    (W(r"\boxed{5{}"), "5", "unbalanced inside the box"),
    (W(r"\fbox{5}"), "5", "\\fbox is not \\boxed"),
    (W(r"\boxed 5"), "5", "\\boxed without braces"),
    (W(r"\boxed {5}"), "5", "space before the brace"),
    (W(r"\boxed{2+3}"), "5", "expressions are not evaluated"),
    (W(r"\boxed{2*3}"), "6", "products are not evaluated"),
    (W(r"\boxed{(5)}"), "5", "parentheses"),
    (W(r"\boxed{{5}}"), "5", "extra braces inside the box"),
    (W(r"\boxed{5\%}"), "5", "percent"),
    (W(r"\boxed{\text{5}}"), "5", "\\text"),
    (W(r"\boxed{5 apples}"), "5", "units"),
    (W(r"\boxed{1e3}"), "1000", "scientific notation"),
    (W(r"\boxed{1_000}"), "1000", "Python digit separators"),
    (W(r"\boxed{0x10}"), "16", "hexadecimal"),
    (W(r"\boxed{inf}"), "1", "inf"),
    (W(r"\boxed{nan}"), "0", "nan"),
    (W("\\boxed{\uff11\uff12}"), "12", "fullwidth digits"),
    (W("\\boxed{\u0661\u0662}"), "12", "Arabic-Indic digits"),
    (W("\\boxed{\u22125}"), "-5", "Unicode minus sign"),
    (W(r"\boxed{1,00}"), "100", "a separator group of two digits"),
    (W(r"\boxed{1,0000}"), "10000", "a separator group of four digits"),
    (W(r"\boxed{,100}"), "100", "a leading separator"),
    (W(r"\boxed{1.000,5}"), "1000.5", "European separators"),
    (W(r"\boxed{5..}"), "5", "only one trailing period is dropped"),
    (W(r"\boxed{--5}"), "5", "double sign"),
    (W(r"\boxed{+-5}"), "-5", "two signs"),
    (W(r"\boxed{1/0}"), "1", "zero denominator"),
    (W(r"\boxed{0/0}"), "0", "0/0"),
    (W(r"\boxed{\frac{1}{0}}"), "1", "zero denominator in \\frac"),
    (W(r"\boxed{\frac{-1}{2}}"), "-1/2", "the sign goes in front of \\frac, not inside"),
    (W(r"\boxed{\frac12}"), "1/2", "\\frac without braces"),
    (W(r"\boxed{1/2/1}"), "1/2", "two slashes"),
    (W(r"\boxed{0.3333333333333333}"), "1/3", "a float that rounds to 1/3 is not 1/3"),
    (W(r"\boxed{" + BIG[:-1] + "1}"), BIG, "301-digit integer off by one in the last place"),
    (W(r"\boxed{12345678901234567891}"), "12345678901234567890", "20 digits: equal as floats, not equal"),
    (W(r"\boxed{" + "9" * 5000 + "}"), "1", "5000-digit number"),
    (W(r"\boxed{__import__('os').getpid()}"), "1", "code in the box"),
    (W("\x00\ufffd{{}}\\boxed{}}{"), "0", "garbage"),
]

FORMAT = [  # (completion, ground truth, expected, what it shows)
    (r"\boxed{5}", "5", 0.0, "no think block"),
    (" <think>ok</think>" + r"\boxed{5}", "5", 0.0, "the completion must start with <think>"),
    ("\n<think>ok</think>" + r"\boxed{5}", "5", 0.0, "not even a newline before <think>"),
    ("ok</think>" + r"\boxed{5}", "5", 0.0, "closing tag only"),
    ("<think>ok " + r"\boxed{5}", "5", 0.0, "the think block never closes"),
    ("<think>a</think><think>b</think>" + r"\boxed{5}", "5", 0.0, "two think blocks"),
    ("<think>a</think>" + r"\boxed{5}</think>", "5", 0.0, "a second closing tag"),
    ("<think>a</think>" + r"\boxed{5}<think>", "5", 0.0, "an opening tag in the answer section"),
    ("<think>a<think>b</think>" + r"\boxed{5}", "5", 0.0, "nested opening tag"),
    ("<THINK>a</THINK>" + r"\boxed{5}", "5", 0.0, "tags are case-sensitive"),
    ("<think>" + r"\boxed{5}" + "</think>", "5", 0.0, "answer only inside the think block"),
    ("<think>" + r"\boxed{5}" + "</think>I am not sure.", "5", 0.0, "answer only inside the think block, text after"),
    ("<think>\nplan\n</think>\n\n" + r"**Answer:** $\boxed{5}$", "5", 1.0, "newlines inside and after the think block"),
]

HACKS = [  # (completion, ground truth, what the policy tries); every one scores 0.0
    (W("".join(f"\\boxed{{{i}}}" for i in range(10))), "5", "list many answers: only the last one counts"),
    (W(" ".join(f"\\boxed{{{i}}}" for i in (5, 5, 5, 4))), "5", "repeat the right answer, end on another"),
    (W(r"\boxed{5}\boxed{"), "5", "a dangling box after the right one"),
    (W(r"\boxed{5 or 6}"), "5", "two answers in one box"),
    (W(r"\boxed{5,6}"), "5", "a list in one box"),
    (W(r"\boxed{x = 5}"), "5", "an equation"),
    (W(r"\boxed{5}", think=r"\boxed{5}") + r" \boxed{4}", "5", "right answer hidden in think, wrong one outside"),
]


def _run_table(score, table):
    wrong = []
    for completion, truth, want, what in table:
        try:
            got = score(completion, truth)
        except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
            wrong.append(f"{what}: raised {type(exc).__name__}: {exc}"[:160])
            continue
        if type(got) is not float or got != want:
            wrong.append(f"{what}: got {got!r}, expected {want!r}  (truth {truth[:20]!r})")
    assert not wrong, f"{len(wrong)} of {len(table)} cases wrong:\n" + "\n".join(wrong)


def test_score_rejects_wrong_and_malformed_answers_without_raising(lesson):
    rl = lesson.load("rlvr.py")
    _run_table(rl.score, [(c, t, 0.0, w) for c, t, w in WRONG_OR_MALFORMED])


def test_score_accepts_every_listed_equivalent_form(lesson):
    rl = lesson.load("rlvr.py")
    _run_table(rl.score, [(c, t, 1.0, w) for c, t, w in EQUIVALENT])


def test_score_applies_the_format_rule(lesson):
    rl = lesson.load("rlvr.py")
    _run_table(rl.score, FORMAT)


def test_score_resists_reward_hacking_attempts(lesson):
    rl = lesson.load("rlvr.py")
    _run_table(rl.score, [(c, t, 0.0, w) for c, t, w in HACKS])


def test_checker_never_evaluates_text(lesson):
    """Safe parsing only: no eval/exec/compile, no sympy or other expression evaluators in rlvr.py."""
    rl = lesson.load("rlvr.py")
    assert rl.score(W(r"\boxed{7*6}"), "42") == 0.0 and rl.score(W(r"\boxed{42}"), "42") == 1.0
    tree = ast.parse(lesson.path("rlvr.py").read_text(encoding="utf-8"))
    banned_calls = {"eval", "exec", "compile", "__import__", "literal_eval", "sympify", "parse_expr", "parse_latex"}
    banned_modules = {"sympy", "latex2sympy2", "math_verify", "mathruler", "numexpr", "asteval", "simpleeval"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in banned_calls:
                found.append(f"line {node.lineno}: call to {name}")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"line {node.lineno}: import {m}" for m in mods if m.split(".")[0] in banned_modules]
    assert not found, "the checker must parse, never evaluate: " + "; ".join(found)


# ---------------------------------------------------------------- the checker: generated cases


def _terminating_decimal(x: Fraction) -> str | None:
    """x written as an exact decimal if its denominator is 2^a·5^b, else None."""
    d, twos, fives = x.denominator, 0, 0
    while d % 2 == 0:
        d, twos = d // 2, twos + 1
    while d % 5 == 0:
        d, fives = d // 5, fives + 1
    if d != 1:
        return None
    places = max(twos, fives)
    digits = str(abs(x.numerator) * 10**places // x.denominator).rjust(places + 1, "0")
    body = digits if places == 0 else digits[:-places] + "." + digits[-places:]
    return ("-" if x < 0 else "") + body


def _forms(x: Fraction, rng) -> list[str]:
    """Strings in the lesson's grammar that all have the value x."""
    sign = "-" if x < 0 else ""
    a, b = abs(x.numerator), x.denominator
    m = int(rng.integers(2, 9))
    out = [f"{sign}{a}/{b}", f"{sign}\\frac{{{a}}}{{{b}}}", f"{sign}\\dfrac{{{a * m}}}{{{b * m}}}", f"{sign}{a * m}/{b * m}"]
    dec = _terminating_decimal(x)
    if dec is not None:
        out += [dec, dec + ".", f" {dec} "]
    if b == 1:
        out += [f"{sign}{a:,}", f"{sign or '+'}{a}", f"{sign}{a}.000"]
    return out


def _misses(x: Fraction) -> list[str]:
    """Strings in the grammar whose value is not x (or not a number at all)."""
    a, b = x.numerator, x.denominator
    out = [f"{a + 1}/{b}", f"{a}/{b + 1}", str(float(x) + 1.0)[:12].rstrip("."), f"{a}{b}"]
    if a != 0:
        out += [f"{-a}/{b}", f"{b}/{a}" if a > 0 else f"-{b}/{-a}"]
    if b != 1 and _terminating_decimal(x) is None:
        out.append(f"{float(x):.17f}")  # a rounded decimal is not the fraction
    return [s for s in out if _oracle_number(s) != x]


def test_score_on_random_values_in_equivalent_forms(lesson):
    rl = lesson.load("rlvr.py")
    rng = np.random.default_rng(2021)
    wrong, cases = [], 0
    for _ in range(150):
        den = int(rng.choice([1, 1, 2, 3, 4, 5, 7, 8, 12, 16, 25, 40, 125, 999]))
        x = Fraction(int(rng.integers(-(10**7), 10**7)), den)
        forms = _forms(x, rng)
        truth = forms[int(rng.integers(len(forms)))]
        decoy = f"\\boxed{{{x + 1}}}"
        think = f"try {decoy}" if rng.random() < 0.5 else "compute carefully"
        for form in forms:
            cases += 1
            tail = "." if rng.random() < 0.5 else ""
            if rl.score(W(f"first guess {decoy}, final \\boxed{{{form}}}{tail}", think), truth) != 1.0:
                wrong.append(f"{form!r} vs truth {truth!r}: expected 1.0")
        for miss in _misses(x):
            cases += 1
            if rl.score(W(f"\\boxed{{{form}}} or \\boxed{{{miss}}}", think), truth) != 0.0:
                wrong.append(f"{miss!r} vs truth {truth!r}: expected 0.0")
    assert not wrong, f"{len(wrong)} of {cases} generated cases wrong, e.g.:\n" + "\n".join(wrong[:12])


# An independent checker for the fuzz test: no regular expressions, written from the README's rules.
_DIGITS = frozenset("0123456789")


def _is_digits(s: str) -> bool:
    return bool(s) and set(s) <= _DIGITS


def _oracle_number(text: str) -> Fraction | None:
    s = "".join(ch for ch in text if not ch.isspace())
    if s.endswith("."):
        s = s[:-1]
    if len(s) > 1000:  # the README lets a checker reject these; int() would refuse 4300+ digits
        return None
    negative = s.startswith("-")
    if s[:1] in ("+", "-"):
        s = s[1:]
    num = den = None
    for cmd in ("\\frac{", "\\dfrac{", "\\tfrac{"):
        if s.startswith(cmd) and s.endswith("}"):
            num, sep, den = s[len(cmd) : -1].partition("}{")
            if not sep:
                return None
    if num is None and s.count("/") == 1:
        num, den = s.split("/")
    if num is not None:
        if not (_is_digits(num) and _is_digits(den)) or int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
    else:
        whole, dot, frac = s.partition(".")
        if (dot and not _is_digits(frac)) or (not dot and not whole):
            return None
        groups = whole.split(",")
        if len(groups) > 1:
            if not (1 <= len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])):
                return None
        if whole and not all(_is_digits(g) for g in groups):
            return None
        value = Fraction(int("".join(groups) or "0")) + (Fraction(int(frac), 10 ** len(frac)) if dot else 0)
    return -value if negative else value


def _oracle_box(section: str) -> str | None:
    starts = [i for i in range(len(section)) if section.startswith("\\boxed{", i)]
    if not starts:
        return None
    depth, body = 0, starts[-1] + len("\\boxed")
    for i, ch in enumerate(section[body:], start=body):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return section[body + 1 : i]
    return None


def _oracle_score(completion: str, truth: str) -> float:
    if completion[:7] != "<think>" or completion.count("<think>") != 1 or completion.count("</think>") != 1:
        return 0.0
    content = _oracle_box(completion[completion.index("</think>") + len("</think>") :])
    got = None if content is None else _oracle_number(content)
    return 1.0 if got is not None and got == _oracle_number(truth) else 0.0


NOISE = ["\\boxed{", "{", "}", "5", "12", " ", "\n", "x", "$", ".", "\\boxed", "<think>", "</think>", "\\frac"]
CONTENT = ["5", "12", "1/2", "\\frac{1}{2}", "0.5", "500", "0", "-", "+", " ", ",", "000", ".", "/", "{", "}", "x", "e3",
           "\uff15", "\\frac", "{1}", "2+3", "\n"]


TRUTHS = {"5": ["5", "+5", "5.", "5.0", "10/2", "\\frac{5}{1}"], "12": ["12", "012", "24/2", "\\dfrac{36}{3}"],
          "1/2": ["0.5", ".5", "\\frac{1}{2}", "2/4"], "0": ["0", "-0", "0/7", "0.00"], "-5": ["-5", "-10/2", "-\\frac{5}{1}"],
          "1,500": ["1500", "1,500", "1500.0", "3000/2"]}


def _fuzz_cases(seed: int, count: int) -> list[tuple[str, str]]:
    """(answer section, ground truth): noise, usually one box holding 1-3 number-like pieces (often a form of the
    truth with noise around it), then a little noise (boxes that never close, stray braces, a second box)."""
    rng = np.random.default_rng(seed)

    def pick(pieces, most):
        return "".join(rng.choice(pieces, size=int(rng.integers(0, most + 1))))

    cases = []
    for _ in range(count):
        truth = str(rng.choice(list(TRUTHS)))
        inner = str(rng.choice(TRUTHS[truth])) if rng.random() < 0.5 else ""
        inner = pick(CONTENT, 1) + inner + pick(CONTENT, 1) if rng.random() < 0.5 else inner or pick(CONTENT, 3)
        box = "\\boxed{" + inner + "}" if rng.random() < 0.85 else ""
        cases.append((pick(NOISE, 4) + box + (pick(NOISE, 2) if rng.random() < 0.4 else ""), truth))
    return cases


def test_score_agrees_with_an_independent_checker_on_fuzzed_completions(lesson):
    rl = lesson.load("rlvr.py")
    table = [(c, t, 1.0, w) for c, t, w in EQUIVALENT] + [(c, t, 0.0, w) for c, t, w in WRONG_OR_MALFORMED + HACKS]
    for completion, truth, want, what in table + FORMAT:  # the oracle itself agrees with the crafted table
        assert _oracle_score(completion, truth) == want, what
    rng = np.random.default_rng(5)
    wrong, hits = [], 0
    for section, truth in _fuzz_cases(seed=17, count=3000):
        completion = ("<think>r</think>" if rng.random() < 0.9 else "<think>r") + section
        want = _oracle_score(completion, truth)
        hits += want == 1.0
        try:
            got = rl.score(completion, truth)
        except Exception as exc:  # noqa: BLE001 - never raises
            got = f"raised {type(exc).__name__}"
        if got != want:
            wrong.append(f"{completion!r} vs {truth!r}: got {got!r}, expected {want!r}")
    assert hits > 300, "the fuzz set must hold correct answers too"
    assert not wrong, f"{len(wrong)} of 3000 fuzzed completions scored differently, e.g.:\n" + "\n".join(wrong[:8])


@pytest.mark.requires("verl")
def test_the_answer_is_the_box_verl_extracts(lesson):
    """verl 0.9.1 `math_dapo.last_boxed_only_string` + `remove_boxed` pick the box; the number rules do the rest."""
    from verl.utils.reward_score import math_dapo

    rl = lesson.load("rlvr.py")
    wrong, boxed, hits = [], 0, 0
    for section, truth in _fuzz_cases(seed=23, count=3000):
        section = section.replace("<think>", "").replace("</think>", "")
        extracted = math_dapo.last_boxed_only_string(section)
        content = None if extracted is None else math_dapo.remove_boxed(extracted)
        boxed += content is not None
        value = None if content is None else _oracle_number(content)
        want = 1.0 if value is not None and value == _oracle_number(truth) else 0.0
        hits += want == 1.0
        got = rl.score("<think>r</think>" + section, truth)
        if got != want:
            wrong.append(f"{section!r} vs {truth!r}: verl extracts {content!r}, got {got!r}, expected {want!r}")
    assert boxed > 2000 and hits > 400
    assert not wrong, f"{len(wrong)} of 3000 disagree with verl's extraction, e.g.:\n" + "\n".join(wrong[:8])
