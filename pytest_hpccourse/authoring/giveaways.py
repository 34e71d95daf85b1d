"""Questions the lesson's own text answers: three forms `hpccourse check` refuses (DESIGN.md, "What makes a
grade valid": questions test reasoning, not reading).

- a question tag in README.md: "（Q1）", "(Q2)", "（见 Q3）" point the learner at the sentence that holds an answer;
- a numeric key of at least three significant digits printed in README.md, in any usual rounding of it
  (0–3 decimals where the rounding keeps three significant digits, the shortest form, thousands separators);
- the text of a keyed choice/multi option, `MIN_OPTION_CHARS` characters or more after normalising (NFKC,
  casefold, punctuation and whitespace dropped), printed verbatim in README.md.

Small numbers (2, 32, 0.5) occur in any text and are exempt; so are short options ("4 B", "fp32").
"""

from __future__ import annotations

import math
import re
import unicodedata
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

from pytest_hpccourse.grading.manifest import OPTION, Lesson, Question

MIN_SIGNIFICANT = 3  # numeric keys with fewer significant digits are exempt
MIN_OPTION_CHARS = 16  # keyed options shorter than this (normalised) are exempt

# a bracket holding a question id: "（Q1）", "(Q2)", "（见 Q3）", "(Q1, Q2)"
TAG = re.compile(r"[（(][^()（）\n]{0,24}?(?<![A-Za-z0-9])Q[1-3](?![0-9])[^()（）\n]{0,24}?[)）]")


def normalize(text: str) -> str:
    """NFKC (fullwidth -> halfwidth), casefold, punctuation (Unicode P*) and whitespace dropped."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in text if not unicodedata.category(c).startswith("P") and not c.isspace())


def significant_digits(text: str) -> int:
    """Significant digits of a decimal numeral: "71.25" -> 4, "0.125" -> 3, "1024" -> 4, "32" -> 2,
    "2.0" -> 1, "3000" -> 1 (trailing zeros of an integer are not significant)."""
    digits = text.lstrip("-+").replace(",", "")
    if "." in digits:
        whole, frac = digits.split(".", 1)
        frac = frac.rstrip("0")
        body = (whole + frac).lstrip("0")
        return len(body)
    return len(digits.lstrip("0").rstrip("0"))


def _shortest(value: float) -> str:
    """The shortest decimal numeral of `value` ("71.25", "1024", "0.125"), never in exponent form."""
    if float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    text = repr(float(value))
    if "e" in text or "E" in text:
        text = format(Decimal(text), "f")
    return text


def _with_separators(numeral: str) -> list[str]:
    """`numeral` with thousands separators in its integer part ("1234567.5" -> "1,234,567.5", "1 234 567.5")."""
    whole, dot, frac = numeral.partition(".")
    if len(whole) <= 3:
        return []
    groups = f"{int(whole):,}"
    return [groups + dot + frac, groups.replace(",", " ") + dot + frac, groups.replace(",", "\u2009") + dot + frac]


def numeral_forms(value: float) -> list[str]:
    """The ways a README would print `value` (absolute value): its shortest form and its roundings to
    0–3 decimals (half-up and half-even) that keep MIN_SIGNIFICANT significant digits, each also with
    thousands separators. Empty when the key itself has fewer than MIN_SIGNIFICANT significant digits."""
    if not math.isfinite(value):
        return []
    shortest = _shortest(abs(value))
    if significant_digits(shortest) < MIN_SIGNIFICANT:
        return []
    forms = [shortest]
    try:
        exact = Decimal(shortest)
    except InvalidOperation:
        return forms
    for decimals in range(4):
        quantum = Decimal(1).scaleb(-decimals)
        for rounding in (ROUND_HALF_UP, ROUND_HALF_EVEN):
            text = format(exact.quantize(quantum, rounding=rounding), "f")
            if significant_digits(text) >= MIN_SIGNIFICANT:
                forms.append(text)
    forms += [s for f in list(forms) for s in _with_separators(f)]
    return list(dict.fromkeys(forms))


def _numeral_pattern(form: str) -> re.Pattern[str]:
    # a whole numeral: not inside a longer one ("125" is not found in "0.125", "1250" or "1,125")
    return re.compile(r"(?<![\d.,])" + re.escape(form) + r"(?![\d]|[.,]\d)")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def tag_reasons(readme: str) -> list[str]:
    return [f"README.md:{_line_of(readme, m.start())} tags a question with {m.group(0)!r}: "
            "a tag points at the sentence that answers it; remove the tag (and make the question one "
            "the text does not answer)" for m in TAG.finditer(readme)]


def numeric_key_reasons(q: Question, readme: str) -> list[str]:
    if q.kind != "numeric" or not isinstance(q.answer, (int, float)) or isinstance(q.answer, bool):
        return []
    for form in numeral_forms(float(q.answer)):
        m = _numeral_pattern(form).search(readme)
        if m:
            return [f"{q.id}: its numeric key {_shortest(float(q.answer))} is printed in README.md:{_line_of(readme, m.start())} "
                    f"as {form!r}; ask for a case the text does not work out"]
    return []


def _keyed_options(q: Question) -> list[tuple[str, str]]:
    if q.kind not in ("choice", "multi") or not q.has_key:
        return []
    keys = {str(q.answer)} if q.kind == "choice" else set(str(q.answer))
    out = []
    for option in q.options:
        m = OPTION.match(option)
        if m and m.group(1) in keys:
            out.append((m.group(1), option[m.end():].strip()))
    return out


def option_reasons(q: Question, readme_normalized: str) -> list[str]:
    reasons = []
    for letter, text in _keyed_options(q):
        norm = normalize(text)
        if len(norm) >= MIN_OPTION_CHARS and norm in readme_normalized:
            reasons.append(f"{q.id}: the text of its keyed option {letter} is printed verbatim in README.md "
                           f"({text[:60]!r}{'…' if len(text) > 60 else ''}); ask for a case the text does not "
                           "work out")
    return reasons


def giveaway_reasons(lesson: Lesson) -> list[str]:
    """Every giveaway of `lesson`'s questions in its README.md (empty when the lesson has no README)."""
    path: Path = lesson.dir / "README.md"
    try:
        readme = path.read_text(encoding="utf-8")
    except OSError:
        return []
    reasons = tag_reasons(readme)
    normalized = normalize(readme)
    for q in lesson.questions:
        reasons += numeric_key_reasons(q, readme) + option_reasons(q, normalized)
    return reasons
