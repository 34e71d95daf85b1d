import pytest

from pytest_hpccourse.grading import formula


@pytest.mark.parametrize("answer", ["16*psi/N", "psi*16/N", "16 * psi / N", "(8+8)*psi*N**-1", "psi/(N/16)",
                                    "16×psi÷N"])
def test_equivalent_forms_match(answer):
    ok, reason = formula.equivalent(answer, "16*psi/N", ["psi", "N"])
    assert ok, reason


@pytest.mark.parametrize("answer", ["16*psi", "12*psi/N", "16*psi/N + 1", "psi/N"])
def test_wrong_forms_do_not_match(answer):
    ok, reason = formula.equivalent(answer, "16*psi/N", ["psi", "N"])
    assert not ok and "not equivalent" in reason


def test_functions_and_integer_points():
    ok, _ = formula.equivalent("2*(N-1)/N*S", "2*S*(N-1)/N", ["S", "N"])
    assert ok
    ok, _ = formula.equivalent("ceil(n/128)*128", "ceil(n/128)*128", ["n"])
    assert ok
    ok, _ = formula.equivalent("n", "ceil(n/128)*128", ["n"])
    assert not ok


@pytest.mark.parametrize("attack, why", [
    ("__import__('os').system('echo pwned')", "not allowed"),
    ("psi.__class__", "attribute"),
    ("[x for x in range(3)]", "comprehensions"),
    ("'abc'", "only numbers"),
    ("open('/etc/passwd')", "not allowed"),
    ("psi ** 1000", "too large"),
    ("9**9**9", "too large"),
    ("lambda: 1", "lambda"),
    ("psi[0]", "subscripts"),
    ("psi if N else 1", "conditional"),
    ("2^psi", "write **"),
    ("x + 1", "unknown name"),
    ("sqrt(psi, N)", "argument"),
    ("max()", "argument"),
    ("True", "only numbers"),
    ("1" * 500, "longer"),
    ("", "empty"),
    ("psi +", "not an arithmetic expression"),
])
def test_rejected_and_never_executed(attack, why):
    ok, reason = formula.equivalent(attack, "16*psi/N", ["psi", "N"])
    assert not ok
    assert why in reason


def test_division_by_zero_in_answer_is_a_message():
    ok, reason = formula.equivalent("psi/(N-N)", "psi/N", ["psi", "N"])
    assert not ok and "division by zero" in reason


def test_key_poles_are_redrawn():
    ok, reason = formula.equivalent("1/(N-2)", "1/(N-2)", ["N"])
    assert ok, reason


def test_compile_rejects_non_text():
    with pytest.raises(formula.FormulaError):
        formula.compile_expression(12, ["n"])  # type: ignore[arg-type]
