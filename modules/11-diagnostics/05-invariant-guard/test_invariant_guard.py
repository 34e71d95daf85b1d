"""Tests for diag-05. Oracles: the hand-labelled `# expect: rule` markers of the given scripts (static part; the
tests strip them before the learner's checker reads a script), the `runtime-*` lines of each script's docstring
(counted by hand from the script), `torch.result_type` for promotion, torch's own RNG seeding for determinism.

Hidden variants are generated here from the given scripts: the markers stripped, local names and helpers renamed,
`import torch as T2`, `from torch import cuda`, lines shifted, the step renamed or marked `# hot-path` instead.
Order: the static checks on the scripts first (milliseconds, they catch most static bugs), then hand-written cases,
then the bit comparisons of the determinism check (microseconds), then the runtime guard (a few tiny CPU steps), and
last the given training scripts under the guard and twice under the same seed.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import tokenize
from collections import Counter

import pytest
import torch

CLEAN = ("clean_mlp", "clean_bf16", "planted_nondeterminism", "planted_promotion")
PLANTED = ("planted_syncs", "planted_helpers", "planted_aliases")
SCRIPTS = CLEAN + PLANTED
EXPECT = re.compile(r"\s*# expect: (.*)$")


@pytest.fixture(scope="module")
def ig(lesson):
    return lesson.load("invariant_guard.py")


def _source(lesson, name: str) -> str:
    return lesson.path(f"scripts/{name}.py").read_text()


def _labels(source: str) -> tuple[str, set[tuple[int, str]]]:
    """The source without its `# expect:` markers, and the labelled (line, rule) set."""
    lines, expected = [], set()
    for i, line in enumerate(source.splitlines(), 1):
        m = EXPECT.search(line)
        if m:
            expected |= {(i, rule.strip()) for rule in m.group(1).split(",")}
            line = line[: m.start()]
        lines.append(line)
    return "\n".join(lines) + "\n", expected


def _rename(source: str, mapping: dict[str, str], skip_imports: bool = False) -> str:
    """Rename NAME tokens (not attributes after a dot) and `{name` inside f-strings; lines keep their numbers."""
    lines = source.splitlines(keepends=True)
    edits, prev = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        line = lines[tok.start[0] - 1].lstrip() if tok.start[0] <= len(lines) else ""
        in_import = skip_imports and line.startswith(("import ", "from "))
        if tok.type == tokenize.NAME and tok.string in mapping and not (prev and prev.string == ".") and not in_import:
            edits.append((tok.start, tok.end, mapping[tok.string]))
        elif tok.type == tokenize.STRING and tok.string[:1] in "fF":
            new = tok.string
            for old, repl in mapping.items():
                new = re.sub(r"\{(\s*)" + re.escape(old) + r"\b", r"{\g<1>" + repl, new)
            if new != tok.string:
                edits.append((tok.start, tok.end, new))
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            prev = tok
    for (row, col), (erow, ecol), text in reversed(edits):
        assert row == erow
        line = lines[row - 1]
        lines[row - 1] = line[:col] + text + line[ecol:]
    return "".join(lines)


def _alias_torch(source: str, alias: str) -> str:
    source = re.sub(r"^import torch(?=$|;)", f"import torch as {alias}", source, flags=re.M)
    return _rename(source, {"torch": alias}, skip_imports=True)


def _from_torch_import_cuda(source: str) -> str:
    out = []
    for line in source.splitlines():
        if line == "import torch":
            line = "import torch; from torch import cuda"  # same line count
        elif not line.lstrip().startswith(("import ", "from ")):
            line = line.replace("torch.cuda.", "cuda.")
        out.append(line)
    return "\n".join(out) + "\n"


def _load_script(lesson, name: str):
    path = lesson.path(f"scripts/{name}.py")
    spec = importlib.util.spec_from_file_location(f"diag05_script_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _doc_field(mod, key: str) -> str:
    for line in (mod.__doc__ or "").splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{mod.__name__} has no {key}")


# ---------------------------------------------------------------------------------------------------------------
# static: the given scripts and their hidden variants
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.points(2)
def test_given_scripts_report_exactly_the_labelled_syncs(ig, lesson):
    for name in SCRIPTS:
        source, expected = _labels(_source(lesson, name))
        assert (name in CLEAN) == (not expected)
        got = ig.find_host_syncs(source, "train_step")
        assert got == expected, f"{name}: missing {sorted(expected - got)}, false positives {sorted(got - expected)}"


def _variants(source: str, expected: set[tuple[int, str]]):
    """(label, source, step, expected) for the hidden variants of one labelled, marker-free script."""
    yield "as is", source, "train_step", expected
    renames = {"loss": "l0ss_t", "acc": "accuracy", "logits": "z", "x": "inputs", "y": "targets", "state": "st",
               "to_host": "fetch", "log_metrics": "_record", "probs": "p", "finite": "okay", "model": "net"}
    yield "renamed", _rename(source, renames), "train_step", expected
    yield "import torch as T2", _alias_torch(source, "T2"), "train_step", expected
    yield "from torch import cuda", _from_torch_import_cuda(source), "train_step", expected
    both = _alias_torch(_from_torch_import_cuda(_rename(source, renames)), "th")
    yield "renamed + aliases", both, "train_step", expected
    yield "shifted 3 lines", "# generated variant\n\n\n" + source, "train_step", {(n + 3, r) for n, r in expected}
    yield "step renamed", _rename(source, {"train_step": "fit_batch"}), "fit_batch", expected
    marked = re.sub(r"^(def train_step\(.*:)$", r"\1  # hot-path", source, flags=re.M)
    yield "step marked, no name", marked, None, expected


@pytest.mark.points(2)
def test_hidden_variants_of_the_scripts(ig, lesson):
    for name in SCRIPTS:
        source, expected = _labels(_source(lesson, name))
        for label, variant, step, want in _variants(source, expected):
            ast.parse(variant)
            got = ig.find_host_syncs(variant, step)
            assert got == want, (f"{name} ({label}): missing {sorted(want - got)}, "
                                 f"false positives {sorted(got - want)}")


def test_a_grep_for_syncs_is_not_enough(ig, lesson):
    """The naive tool the lesson replaces: a regex finds `.item()` in strings, comments and outside the step."""
    source, expected = _labels(_source(lesson, "clean_mlp"))
    naive = {(i, "item") for i, line in enumerate(source.splitlines(), 1) if ".item()" in line}
    assert naive and not expected
    assert ig.find_host_syncs(source, "train_step") == set()


# ---------------------------------------------------------------------------------------------------------------
# static: hand-written cases, one rule or one decoy each
# ---------------------------------------------------------------------------------------------------------------

HEAD = "import torch\nimport torch.nn.functional as F\n\n\ndef train_step(t: torch.Tensor, cfg, model, n: int):\n"
BODY_LINE = 6  # the first line of the step's body

CASES = [
    # (body lines, expected rules on the listed body line indices (0-based))
    (["v = t.item()"], {0: "item"}),
    (["getter = t.item", "keys = cfg.items()"], {}),
    (["cpu = 3", "v = cpu + n", "w = t.to('cpu')"], {}),
    (["a = t.cpu()", "b = t.numpy()", "c = t.tolist()"], {0: "cpu", 1: "numpy", 2: "tolist"}),
    (["v = float(t.item())"], {0: "item"}),
    (["v = float(t.shape[0])", "w = int(t.dim())", "u = float(len(t))", "z = float(n)"], {}),
    (["v = int(t.argmax())", "w = bool(t)", "u = float(F.relu(t).sum())"],
     {0: "scalar-cast", 1: "scalar-cast", 2: "scalar-cast"}),
    (["v = float(model(t))", "print(model(t))"], {}),
    (["h = torch.relu(t)", "h2 = h * 2", "v = float(h2[0])"], {2: "scalar-cast"}),
    (["s: float = t.sum()", "print('s', s)"], {1: "print-tensor"}),
    (["print(t.shape, t.dtype)", "print(f'{t.shape} {n}')", "print('t.item()')"], {}),
    (["print(f'mean {t.mean():.3f}')", "print(t.grad)", "print(t.T)"],
     {0: "print-tensor", 1: "print-tensor", 2: "print-tensor"}),
    (["if t.requires_grad:", "    pass", "if t.grad is not None:", "    pass", "if t is None:", "    pass"], {}),
    (["if cfg.get('log'):", "    pass", "while n > 0:", "    n -= 1"], {}),
    (["if not t.isfinite().all():", "    pass", "while t.norm() > 1:", "    t = t / 2",
      "v = 1 if t.any() else 0", "assert torch.isfinite(t).all()"],
     {0: "tensor-if", 2: "tensor-if", 4: "tensor-if", 5: "tensor-if"}),
    (["if n > 0 and t.sum() > 0:", "    pass"], {0: "tensor-if"}),
    (["torch.cuda.synchronize()", "torch.cuda.is_available()", "torch.cuda.current_device()"], {0: "cuda-sync"}),
    (["rows = sorted(cfg, key=lambda r: r.item())", "def inner():", "    return t.tolist()"],
     {0: "item", 2: "tolist"}),
    (["print(t if n > 0 else 'off')", "u = t if n else None", "print(u)"], {}),
    (["w = (t", "     .detach()", "     .cpu())", "v = float(", "    t.sum())"], {0: "cpu", 3: "scalar-cast"}),
    (["print(t.cpu())", "print(f'{t.item():.3f}')", "print(float(t))"],
     {0: "cpu, print-tensor", 1: "item", 2: "scalar-cast"}),
    (["v = (1", "     if t.any() else 2)", "if (", "    t > 0", "):", "    pass"], {0: "tensor-if", 2: "tensor-if"}),
    (["v = int(t, 2)", "w = int(t.sum(), n)"], {}),
    (["def inner(x: torch.Tensor, y):", "    a = float(x)", "    b = float(t)", "    return a + b",
      "def marked(x: torch.Tensor):  # hot-path", "    return float(x)"], {2: "scalar-cast", 5: "scalar-cast"}),
    (["ok = [x for x in cfg if t.any()]", "w = [1 if t.any() else 0 for _ in cfg]", "z = {k: 1 for k in cfg if t > 0}"],
     {1: "tensor-if"}),
]


def test_hand_written_cases_one_rule_each(ig):
    for body, want in CASES:
        source = HEAD + "".join(f"    {line}\n" for line in body) + "    return t\n"
        expected = {(BODY_LINE + i, r.strip()) for i, rules in want.items() for r in rules.split(",")}
        got = ig.find_host_syncs(source, "train_step")
        assert got == expected, f"\n{source}\nmissing {sorted(expected - got)}, false positives {sorted(got - expected)}"


IMPORT_FORMS = [
    ("import torch.cuda", "torch.cuda.synchronize()"),
    ("from torch.cuda import synchronize as sync_now", "sync_now()"),
    ("import torch.cuda as tc", "tc.synchronize()"),
    ("from torch import cuda as gpu", "gpu.synchronize()"),
]


def test_cuda_sync_under_every_import_form(ig):
    for imp, call in IMPORT_FORMS:
        source = f"{imp}\n\n\ndef train_step(x):\n    {call}\n    return x\n\n\n{call}\n"
        assert ig.find_host_syncs(source, "train_step") == {(5, "cuda-sync")}, imp
    local = "import torch\n\n\ndef train_step(x):\n    synchronize = print\n    synchronize(x)\n    return x\n"
    assert ig.find_host_syncs(local, "train_step") == set()


HOT = '''import torch


def leaf(t):
    return t.item()


def middle(t):
    return leaf(t) + 1


def lonely(t):
    return t.tolist()


def recursive(t, k):
    if k:
        return recursive(t, k - 1)
    return t.cpu()


def train_step(t):
    middle(t)
    recursive(t, 3)
    callback = lonely
    return callback


class Trainer:
    def train_step(self, t):
        return t.numpy()

    def helper(self, t):
        return t.tolist()

    def evaluate(self, t):  # hot-path
        self.helper(t)
        return float(t.item())


def marked_only(t):  # hot-path
    return t.numpy()


print(leaf(torch.ones(1)))
'''


def test_hot_path_roots_markers_and_transitive_helpers(ig):
    with_step = ig.find_host_syncs(HOT, "train_step")
    assert with_step == {(5, "item"), (19, "cpu"), (38, "item"), (42, "numpy")}
    assert ig.find_host_syncs(HOT, None) == {(38, "item"), (42, "numpy")}
    assert ig.find_host_syncs(HOT, "middle") == {(5, "item"), (38, "item"), (42, "numpy")}
    assert ig.find_host_syncs(HOT, "no_such_function") == {(38, "item"), (42, "numpy")}
    # a marker inside a string is not a marker; a file without torch has no findings beyond the syntactic rules
    src = 'def train_step(t):\n    s = "# hot-path"\n    return s\n\n\ndef f(t):\n    x = "x"  # not a marker\n    return t.item()\n'
    assert ig.find_host_syncs(src, None) == set()


SAME_NAMES = '''import torch


def helper(t):
    return t.cpu()


@torch.no_grad()  # hot-path
def decorated(t):
    return t.item()


@torch.no_grad()
def marked_def(t):  # hot-path
    return t.numpy()


class Trainer:
    def helper(self, t):
        return t

    def train_step(self, t):  # hot-path
        return self.helper(t)


def train_step(trainer, t):
    trainer.helper(t)
    return t
'''


ONLY_METHODS = '''import torch


class Logger:
    def flush(self):
        torch.cuda.synchronize()

    def train_step(self, t):
        def emit():
            return t.item()
        return emit


def train_step(t):
    flush()
    emit()
    return t
'''


def test_hot_path_ignores_method_calls_and_decorator_lines(ig):
    assert ig.find_host_syncs(SAME_NAMES, "train_step") == {(15, "numpy")}
    assert ig.find_host_syncs(SAME_NAMES, None) == {(15, "numpy")}
    # a bare call follows top-level defs only: no method `flush`, no nested `emit` of the same name
    assert ig.find_host_syncs(ONLY_METHODS, "train_step") == set()


def test_call_twice_gives_the_same_answer(ig, lesson):
    source, expected = _labels(_source(lesson, "planted_syncs"))
    first = ig.find_host_syncs(source, "train_step")
    assert ig.find_host_syncs(HOT, "train_step") != first
    assert ig.find_host_syncs(source, "train_step") == first == expected


# ---------------------------------------------------------------------------------------------------------------
# determinism (the fast cases; the training scripts run last)
# ---------------------------------------------------------------------------------------------------------------


def _sequence(*results):
    it = iter(results)
    return lambda: next(it)


def test_determinism_compares_structure_dtype_and_leaf_types(ig):
    t = torch.arange(4, dtype=torch.float32)
    assert ig.bitwise_deterministic(_sequence((t, [t], {"a": t, "k": 2}), (t.clone(), [t.clone()], {"a": t, "k": 2})), 3)
    assert not ig.bitwise_deterministic(_sequence((t,), [t]), 3)
    assert not ig.bitwise_deterministic(_sequence({"a": t}, {"b": t}), 3)
    assert not ig.bitwise_deterministic(_sequence(torch.zeros(3), torch.zeros(3, dtype=torch.int32)), 3)
    assert not ig.bitwise_deterministic(_sequence(torch.zeros(2, dtype=torch.int16), torch.zeros(2, dtype=torch.bfloat16)), 3)
    assert not ig.bitwise_deterministic(_sequence(1, 1.0), 3)
    assert not ig.bitwise_deterministic(_sequence((t, 1), (t, True)), 3)
    assert ig.bitwise_deterministic(_sequence((t, "x", None, 2.5), (t, "x", None, 2.5)), 3)


def test_determinism_reseeds_before_each_run_and_compares_bits(ig):
    def dropout_step():
        x = torch.linspace(-1, 1, 33)
        return torch.nn.functional.dropout(x, p=0.5, training=True), torch.randn(2, 3)

    assert ig.bitwise_deterministic(dropout_step, 7)
    calls = []

    def one_ulp_drift():  # the second run differs by one float32 ulp in one element
        calls.append(1)
        out = torch.rand(6, dtype=torch.float32)
        if len(calls) % 2 == 0:
            out[4] = torch.nextafter(out[4], torch.tensor(2.0))
        return out

    assert not ig.bitwise_deterministic(one_ulp_drift, 7)
    nan_out = torch.tensor([1.0, float("nan"), -0.0])
    assert ig.bitwise_deterministic(lambda: {"a": nan_out.clone(), "n": 3}, 7)
    flips = iter([0.0, -0.0])
    assert not ig.bitwise_deterministic(lambda: torch.tensor([next(flips)]), 7)  # -0.0 == 0.0, bits differ
    shapes = iter([torch.zeros(2, 3), torch.zeros(3, 2)])
    assert not ig.bitwise_deterministic(lambda: next(shapes), 7)
    dtypes = iter([torch.zeros(3), torch.zeros(3, dtype=torch.float64)])
    assert not ig.bitwise_deterministic(lambda: next(dtypes), 7)
    lists = iter([[torch.ones(1)], [torch.ones(1), torch.ones(1)]])
    assert not ig.bitwise_deterministic(lambda: next(lists), 7)
    counter = iter(range(10))
    assert not ig.bitwise_deterministic(lambda: (torch.ones(1), next(counter)), 7)
    assert ig.bitwise_deterministic(lambda: torch.empty(0), 7)


def test_determinism_sets_and_restores_deterministic_algorithms(ig):
    seen = []

    def probe():
        seen.append((torch.are_deterministic_algorithms_enabled(), torch.initial_seed()))
        return torch.ones(1)

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        assert ig.bitwise_deterministic(probe, 99)
        assert seen == [(True, 99), (True, 99)]
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        torch.use_deterministic_algorithms(False)

        def boom():
            raise RuntimeError("step failed")

        with pytest.raises(RuntimeError, match="step failed"):
            ig.bitwise_deterministic(boom, 1)
        assert not torch.are_deterministic_algorithms_enabled()
        assert ig.bitwise_deterministic(probe, 5)
        assert not torch.are_deterministic_algorithms_enabled()
        assert seen[-2:] == [(True, 5), (True, 5)]
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


# ---------------------------------------------------------------------------------------------------------------
# runtime guard
# ---------------------------------------------------------------------------------------------------------------


def test_guard_records_each_host_sync_in_order(ig):
    g = torch.Generator().manual_seed(11)
    t = torch.randn(5, generator=g)
    s = t.sum()
    with ig.HotPathGuard() as guard:
        u = (t * 2 + 1).relu().detach()
        s.item()
        u.tolist()
        t.cpu()
        t.numpy()
        bool(s > 0)
        float(s)
        int(s)
        range(7)[torch.tensor(3)]
        repr(t)
        f"{s:.2f}"  # noqa: B018
        str(u)
        len(t)
        t.shape[0]  # noqa: B018
    syncs = [n for kind, n in guard.events if kind == "sync"]
    assert syncs == ["item", "tolist", "cpu", "numpy", "bool", "float", "int", "index", "repr", "format", "repr"]
    assert all(kind == "sync" for kind, _ in guard.events)
    torch.testing.assert_close(u, (t * 2 + 1).relu(), rtol=0, atol=0)  # results pass through unchanged
    with ig.HotPathGuard() as fresh:
        t.add(1.0)
    assert fresh.events == []


def test_promotion_rule_conditions(ig):
    """Each condition of the promotion rule on its own: a floating output is required, keyword tensors (`other=`,
    `out=`) are arguments, the category of a tensor is its dim() (not its number of elements)."""
    g = torch.Generator().manual_seed(3)
    h = torch.randn(4, 3, generator=g).to(torch.bfloat16)
    f = torch.randn(4, 3, generator=g)
    one_bf16, empty_bf16 = torch.ones(1, dtype=torch.bfloat16), torch.ones(0, dtype=torch.bfloat16)
    vec, scalar = torch.rand(3, generator=g), torch.tensor(1.5)
    out_f32, out_bf16 = torch.empty(4, 3), torch.empty(4, 3, dtype=torch.bfloat16)
    row_f32 = torch.empty(3)
    with ig.HotPathGuard() as guard:
        h > f  # noqa: B015
        torch.eq(h, f)
        torch.isclose(h.float(), f)
        empty_bf16 + scalar  # noqa: B018
        h.add(f.sum())
    assert guard.events == [], "a boolean output or a bf16 (0,) vector + a float32 0-dim tensor is not a promotion"
    with ig.HotPathGuard() as guard:
        torch.add(f, other=h)
        torch.mul(input=h, other=f)
        vec + one_bf16  # noqa: B018
        one_bf16 * vec  # noqa: B018
        torch.add(h, h, out=out_f32)
        torch.add(f, f, out=out_bf16)
        torch.sum(h, 0, dtype=None, out=row_f32)  # dtype=None is not an explicit dtype: bf16 -> float32
    assert guard.events == [("promotion", n) for n in ("add", "mul", "add", "mul", "add", "add", "sum")], guard.events
    assert out_f32.dtype == torch.float32 and out_bf16.dtype == torch.bfloat16


DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64, torch.bool)


def _operand(kind: str, dtype: torch.dtype, g: torch.Generator):
    if kind == "py":
        return {torch.bool: True, torch.int32: 3, torch.int64: -2}.get(dtype, 1.5)
    shape = (3,) if kind == "vec" else ()
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 4 + 1).to(dtype)


def _oracle(a, b, out_dtype: torch.dtype) -> bool:
    """Silent promotion per README: a floating output dtype that differs from a participating floating input."""
    tensors = [v for v in (a, b) if isinstance(v, torch.Tensor)]
    participating = [v for v in tensors if v.dim() > 0] or tensors
    floats = {v.dtype for v in participating if v.is_floating_point()}
    return bool(floats) and out_dtype.is_floating_point and len(floats | {out_dtype}) > 1


@pytest.mark.points(2)
def test_promotion_matches_torch_result_type(ig):
    g = torch.Generator().manual_seed(5)
    cases = 0
    positives = 0
    for ka in ("vec", "0d"):
        for kb in ("vec", "0d", "py"):
            for da in DTYPES:
                for db in DTYPES:
                    a, b = _operand(ka, da, g), _operand(kb, db, g)
                    if da == torch.bool and (db == torch.bool):
                        continue
                    want = _oracle(a, b, torch.result_type(a, b))
                    for op in (torch.add, torch.mul):
                        with ig.HotPathGuard() as guard:
                            out = op(a, b)
                        assert out.dtype == torch.result_type(a, b)
                        got = [e for e in guard.events if e[0] == "promotion"]
                        assert len(got) == int(want), (op.__name__, ka, da, kb, db, guard.events)
                        cases += 1
                        positives += want
                    if ka == "vec" and da.is_floating_point:  # in place: the output keeps a's dtype
                        with ig.HotPathGuard() as guard:
                            a.clone().add_(b)
                        want = _oracle(a, b, da)
                        assert len([e for e in guard.events if e[0] == "promotion"]) == int(want), \
                            ("add_", ka, da, kb, db, guard.events)
    assert cases > 250 and 40 < positives < cases - 40


def test_explicit_casts_and_dtype_arguments_are_not_promotions(ig):
    g = torch.Generator().manual_seed(2)
    h = torch.randn(4, 3, generator=g).to(torch.bfloat16)
    f = torch.randn(4, 3, generator=g)
    row_f32 = torch.empty(3)
    with ig.HotPathGuard() as guard:
        h.float()
        h.to(torch.float32)
        h.double()
        f.half()
        f.type_as(h)
        torch.sum(h, dim=0, dtype=torch.float32)
        torch.softmax(h, dim=-1, dtype=torch.float32)
        torch.sum(h, 0, dtype=torch.float32, out=row_f32)
        f.clone().copy_(h)
        torch.cat([h, h])
        h * torch.tensor(2.0)
    assert guard.events == []
    with ig.HotPathGuard() as guard:
        torch.cat([h, f])
        torch.where(f > 0, h, f)
        torch.stack([h.half(), h], 0)  # float16 with bfloat16: both become float32
    assert [k for k, _ in guard.events] == ["promotion"] * 3
    assert [n for _, n in guard.events] == ["cat", "where", "stack"]


@pytest.mark.points(2)
def test_guard_on_the_given_training_steps(ig, lesson):
    for name in SCRIPTS:
        mod = _load_script(lesson, name)
        state = mod.make_state(3)
        x, y = mod.make_batch(4)
        x0, y0 = x.clone(), y.clone()
        with ig.HotPathGuard() as guard:
            mod.train_step(state, x, y)
        torch.testing.assert_close((x, y), (x0, y0), rtol=0, atol=0)
        want_syncs = Counter(s.strip() for s in _doc_field(mod, "runtime-syncs").split(",") if s.strip())
        want_promotions = int(_doc_field(mod, "runtime-promotions"))
        syncs = Counter(n for kind, n in guard.events if kind == "sync")
        promotions = sum(kind == "promotion" for kind, _ in guard.events)
        assert (syncs, promotions) == (want_syncs, want_promotions), (name, guard.events)


def _two_steps(mod):
    def run():
        state = mod.make_state(0)
        losses = [mod.train_step(state, *mod.make_batch(i)) for i in range(2)]
        return {"losses": losses, "params": [p.detach().clone() for p in state["model"].parameters()]}
    return run


def test_determinism_of_the_given_scripts(ig, lesson, capsys):
    for name in SCRIPTS:
        mod = _load_script(lesson, name)
        want = {"yes": True, "no": False}[_doc_field(mod, "deterministic")]
        assert ig.bitwise_deterministic(_two_steps(mod), 1234) is want, name
    capsys.readouterr()
