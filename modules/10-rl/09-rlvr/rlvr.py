"""rl-09: verifiable rewards (RLVR) for arithmetic answers, and the unbiased pass@k estimator.

score(completion, ground_truth) -> 1.0 or 0.0, never an exception:
    format   the completion starts with "<think>", holds exactly one "<think>" and exactly one "</think>";
             the answer section is everything after "</think>"
    answer   the content of the LAST "\\boxed{" of the answer section, braces matched (nested braces are
             part of the content); if that last box never closes, there is no answer (no fallback)
    number   whitespace deleted, one trailing "." dropped, then exactly one of
                 [+-] int[.digits]   int = ASCII digits, or 1-3 digits then ",ddd" groups  ("1,234.5")
                 [+-] .digits                                                               ("-.5")
                 [+-] a/b                            a, b ASCII digit strings, b != 0
                 [+-] \\frac{a}{b}  (also \\dfrac, \\tfrac)
             compared as exact rationals (fractions.Fraction); anything else is not a number.
             Nothing is evaluated: "2+3" is not 5.

pass_at_k(n, c, k): Chen et al. 2021's unbiased estimator 1 - C(n-c, k) / C(n, k), written as the product
1 - prod_{i=n-c+1}^{n} (1 - k/i) so that no binomial coefficient is ever formed.
"""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
BOX = "\\boxed{"


def answer_section(completion: str) -> str | None:
    """The text after "</think>" when the format rule holds, else None."""
    ### HINT: count the tags over the whole string; the opening tag sits at index 0
    ### BEGIN SOLUTION
    if not completion.startswith(THINK_OPEN):
        return None
    if completion.count(THINK_OPEN) != 1 or completion.count(THINK_CLOSE) != 1:
        return None
    return completion.split(THINK_CLOSE, 1)[1]
    ### END SOLUTION


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} of `text` (nested braces included), or None when there is none or it never closes."""
    ### HINT: find the last opening, then walk forward with a depth counter; every "{" and "}" counts
    ### BEGIN SOLUTION
    start = text.rfind(BOX)
    if start < 0:
        return None
    body = start + len(BOX)
    depth = 1
    for i in range(body, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[body:i]
    return None
    ### END SOLUTION


def parse_number(text: str) -> Fraction | None:
    """The exact value of an answer in the lesson's number grammar (see the module docstring), or None."""
    ### HINT: full-string matches only, ASCII digits only; a zero denominator and an over-long digit string are "not a number", not an error
    ### BEGIN SOLUTION
    s = "".join(text.split())
    if s.endswith("."):
        s = s[:-1]
    if len(s) > 1000:  # int() refuses strings of more than 4300 digits; no answer needs that many
        return None
    decimal = re.fullmatch(r"[+-]?(?:(?:[0-9]+|[0-9]{1,3}(?:,[0-9]{3})+)(?:\.[0-9]+)?|\.[0-9]+)", s)
    if decimal:
        return Fraction(s.replace(",", ""))
    ratio = re.fullmatch(r"([+-]?)([0-9]+)/([0-9]+)", s) or re.fullmatch(r"([+-]?)\\[dt]?frac\{([0-9]+)\}\{([0-9]+)\}", s)
    if ratio is None or int(ratio[3]) == 0:
        return None
    value = Fraction(int(ratio[2]), int(ratio[3]))
    return -value if ratio[1] == "-" else value
    ### END SOLUTION


def score(completion: str, ground_truth: str) -> float:
    """1.0 when the completion is well formed and its last boxed answer equals `ground_truth` exactly, else 0.0."""
    ### BEGIN SOLUTION
    section = answer_section(completion)
    if section is None:
        return 0.0
    content = last_boxed(section)
    if content is None:
        return 0.0
    got, want = parse_number(content), parse_number(ground_truth)
    return 1.0 if got is not None and got == want else 0.0
    ### END SOLUTION


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from c correct out of n samples (Chen et al. 2021): 1 - C(n-c, k) / C(n, k).

    Needs 0 <= c <= n and 1 <= k <= n (else ValueError). Product form, no binomial coefficient formed.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    ### HINT: every k-subset holds a correct sample once fewer than k samples are wrong
    ### BEGIN SOLUTION
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))
    ### END SOLUTION


def estimate_pass_at_k(num_samples: int | np.ndarray, num_correct: np.ndarray, k: int) -> np.ndarray:
    """Per-problem pass@k, float64 [P]. num_samples: one int for all problems or ints [P]; num_correct: ints [P]."""
    ### BEGIN SOLUTION
    correct = np.asarray(num_correct)
    samples = np.broadcast_to(np.asarray(num_samples), correct.shape)
    return np.array([pass_at_k(int(n), int(c), k) for n, c in zip(samples, correct, strict=True)], dtype=np.float64)
    ### END SOLUTION
