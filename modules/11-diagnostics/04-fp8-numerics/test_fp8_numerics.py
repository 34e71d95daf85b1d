"""Tests for diag-04.

Oracles:
- Delayed scaling: Transformer Engine's own Python update path, vendored below verbatim (decorators dropped) from
  NVIDIA/TransformerEngine @ d0067d0d, transformer_engine/pytorch/quantization.py lines 1067-1116
  (`_update_amax_history`, `_default_get_amax_and_update_history`, `_default_sf_compute`; Apache-2.0): TE itself
  cannot be installed here. Plus TE's hand cases (tests/pytorch/test_recipe.py, test_scale_update_numeric_scenarios)
  and a float64 "max over the last L recorded steps" reference.
- Cast report: a float64 classification of the float32 product, and torch's real casts to the four float8 dtypes
  (measured on this CPU build, torch 2.13).
- NaN origin: planted models where execution order differs from registration order.
Tolerances: histories are float32 copies of recorded values, compared exactly; scales are one float32 division by an
amax and one by a power of two, compared at rel 1e-6 (a few float32 ulps: another op order or float64 intermediates
agree to 1 ulp). Cast fractions are counts / n, compared exactly.
"""

import math

import pytest
import torch
from torch import nn

FP32_MAX = torch.finfo(torch.float32).max


@pytest.fixture(scope="module")
def f8(lesson):
    return lesson.load("fp8_numerics.py")


# ---------------------------------------------------------------------------------------------------------------------
# Transformer Engine's Python path, verbatim (TransformerEngine d0067d0d, transformer_engine/pytorch/quantization.py)
# ---------------------------------------------------------------------------------------------------------------------


def _update_amax_history(amax_history: torch.Tensor) -> torch.Tensor:
    """Update amax history and set next amax to zero."""
    if amax_history.shape[0] > 1:
        new_amax_history = torch.roll(amax_history, -1, 0)
        amax_history.copy_(new_amax_history)
    amax_history[0].fill_(0.0)
    return amax_history


def _default_get_amax_and_update_history(amax_history, amax_compute_algo: str):
    """Default function to obtain amax from history."""
    if amax_compute_algo == "max":
        amax = torch.max(amax_history, dim=0).values
    else:  # amax_compute_algo == "most_recent"
        amax = amax_history[0].clone()

    amax_history = _update_amax_history(amax_history)
    return amax_history, amax


def _default_sf_compute(amax, scale, fp8_max: float, margin: int, _fp32_max: float = FP32_MAX):
    sf = (fp8_max / amax) / (2**margin)
    sf = torch.where(amax > 0.0, sf, scale)
    sf = torch.where(torch.isfinite(amax), sf, scale)
    sf = torch.where(torch.isinf(sf), torch.full_like(sf, _fp32_max), sf)
    scale.copy_(sf)
    return scale


class TeState:
    def __init__(self, fp8_max, margin, length, algo):
        self.fp8_max, self.margin, self.algo = fp8_max, margin, algo
        self.amax_history = torch.zeros(length, dtype=torch.float32)
        self.scale = torch.ones((), dtype=torch.float32)

    def record(self, x):
        if x.numel():
            self.amax_history[0] = torch.maximum(self.amax_history[0], x.abs().max().float())

    def update(self):
        self.amax_history, amax = _default_get_amax_and_update_history(self.amax_history, self.algo)
        _default_sf_compute(amax, self.scale, self.fp8_max, self.margin)


def _same(a, b):
    return torch.equal(torch.nan_to_num(a, nan=-7.0), torch.nan_to_num(b, nan=-7.0)) and torch.equal(a.isnan(), b.isnan())


def _scale_close(got, want):
    got, want = float(got), float(want)
    return got == want or math.isclose(got, want, rel_tol=1e-6)


def _steps(seed, n_steps):
    """Per step: a tensor to record (or None: the module did not run), with spikes, zeros, tiny, inf and NaN steps."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in range(n_steps):
        kind = torch.randint(0, 12, (1,), generator=g).item()
        size = int(torch.randint(1, 40, (1,), generator=g).item())
        x = torch.randn(size, generator=g) * torch.exp(torch.randn((), generator=g) * 3)
        if kind == 0:
            out.append(None)  # nothing recorded: slot 0 stays 0
        elif kind == 1:
            out.append(x * 1e3)  # spike
        elif kind == 2:
            out.append(torch.zeros(size))
        elif kind == 3 and t % 3 == 0:
            out.append(torch.tensor([1e-42, -3e-43]))  # float32 subnormal amax: the scale overflows to FP32_MAX
        elif kind == 4 and t % 4 == 1:
            out.append(torch.tensor([1.0, float("inf")]))
        elif kind == 5 and t % 5 == 2:
            out.append(torch.tensor([float("nan"), 2.0]))
        else:
            out.append(x)
    return out


CONFIGS = [  # fp8_max, margin, history length, algo
    (448.0, 0, 5, "max"), (448.0, 0, 5, "most_recent"), (57344.0, 2, 16, "max"), (57344.0, 1, 3, "most_recent"),
    (448.0, 3, 1, "max"), (240.0, 0, 2, "max"), (448.0, 1, 7, "max"), (57344.0, 0, 1, "most_recent"),
]


@pytest.mark.points(2)
def test_delayed_scaling_matches_transformer_engine(f8):
    for c, (fp8_max, margin, length, algo) in enumerate(CONFIGS):
        for seed in (11 + c, 101 + c):
            ds, te = f8.DelayedScaling(fp8_max, margin, length, algo), TeState(fp8_max, margin, length, algo)
            for t, x in enumerate(_steps(seed, 45)):
                if x is not None:
                    ds.record(x)
                    te.record(x)
                ret = ds.update()
                te.update()
                where = f"fp8_max={fp8_max} margin={margin} L={length} {algo} seed={seed} step {t}"
                assert _same(ds.amax_history, te.amax_history), (
                    f"{where}: amax_history {ds.amax_history.tolist()}, Transformer Engine {te.amax_history.tolist()}")
                assert ds.scale.dtype == torch.float32 and ds.scale.numel() == 1, f"{where}: scale {ds.scale!r}"
                assert _scale_close(ds.scale, te.scale), f"{where}: scale {float(ds.scale)!r}, TE {float(te.scale)!r}"
                assert _scale_close(ret, te.scale), f"{where}: update() returned {ret!r}, the new scale is {te.scale!r}"


@pytest.mark.points(1)
def test_scale_update_numeric_scenarios_from_te(f8):
    """TE's tests/pytorch/test_recipe.py::test_scale_update_numeric_scenarios (history length 1, scale starts at 1)."""
    for fp8_max in (448.0, 57344.0):
        tiny = float(torch.tensor(fp8_max) / torch.tensor(FP32_MAX)) / 2
        for case, amax, want in [("zero", 0.0, 1.0), ("tiny", tiny, FP32_MAX), ("normal", 0.6180339, None),
                                 ("inf", float("inf"), 1.0), ("nan", float("nan"), 1.0)]:
            ds = f8.DelayedScaling(fp8_max, 0, 1, "max")
            ds.amax_history[0] = amax
            ds.update()
            want = float(torch.tensor(fp8_max) / torch.tensor(amax, dtype=torch.float32)) if want is None else want
            assert _scale_close(ds.scale, want), f"fp8_max={fp8_max}, amax {case} ({amax}): scale {float(ds.scale)}, expected {want}"
            assert float(ds.amax_history[0]) == 0.0, f"amax {case}: slot 0 must be zeroed after the update"
    ds = f8.DelayedScaling(448.0, 0, 4, "max")  # the kept scale is the previous one, not 1
    for amax in (2.0, 0.0, 0.0, 0.0, 0.0, 0.0):
        ds.amax_history[0] = amax
        ds.update()
    assert _scale_close(ds.scale, 224.0), f"after the 2.0 left the window the scale must stay 448/2 = 224, got {float(ds.scale)}"


@pytest.mark.points(1)
def test_scale_is_max_over_the_last_L_steps_float64(f8):
    """Independent float64 statement of the window: after step t, 'max' uses max(amax_{t-L+1..t}), 'most_recent' amax_t."""
    g = torch.Generator().manual_seed(5)
    for length, margin in [(1, 0), (2, 1), (6, 0), (13, 2)]:
        amaxes = (torch.rand(40, generator=g, dtype=torch.float64) * 50 + 0.01).tolist()
        amaxes[7] = 900.0  # one spike: 'max' remembers it for exactly L steps
        for algo in ("max", "most_recent"):
            ds = f8.DelayedScaling(448.0, margin, length, algo)
            for t, a in enumerate(amaxes):
                ds.record(torch.tensor([a, -a / 3], dtype=torch.float32))
                ds.update()
                window = [float(torch.tensor(v, dtype=torch.float32)) for v in amaxes[max(0, t - length + 1): t + 1]]
                amax = max(window) if algo == "max" else window[-1]
                want = 448.0 / amax / 2**margin
                assert math.isclose(float(ds.scale), want, rel_tol=1e-6), (
                    f"L={length} margin={margin} {algo} step {t}: scale {float(ds.scale)}, expected 448/{amax}/2^{margin} = {want}")
    ds = f8.DelayedScaling(448.0, 0, 3, "max")
    ds.record(torch.tensor([3.0]))
    ds.record(torch.tensor([-5.0]))  # two casts in one step: slot 0 holds their max
    ds.update()
    assert math.isclose(float(ds.scale), 448.0 / 5.0, rel_tol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# cast report
# ---------------------------------------------------------------------------------------------------------------------

E3M2 = ("e3m2", 28.0, 0.25, 0.0625)  # OCP MX FP6 E3M2: no torch dtype, so only arithmetic on magnitudes works
E2M1 = ("e2m1", 6.0, 1.0, 0.5)  # OCP MX FP4 E2M1


def _report_ref(x, scale, fmt):
    y = (x.to(torch.float32) * torch.tensor(scale, dtype=torch.float32)).double()
    a, fin = y.abs(), torch.isfinite(x)
    half = fmt.min_subnormal / 2
    n = x.numel()
    return ((fin & (a > fmt.max)).sum().item() / n, (fin & (a > half) & (a < fmt.min_normal)).sum().item() / n,
            (fin & (x != 0) & (a <= half)).sum().item() / n, (~fin).sum().item() / n)


def _check_report(got, want, where):
    names = ("overflow", "subnormal", "flushed", "nonfinite")
    got = tuple(got)
    assert len(got) == 4, f"{where}: expected a 4-field CastReport, got {got!r}"
    for name, g_, w in zip(names, got, want):
        assert abs(float(g_) - w) <= 1e-12, f"{where}: {name} = {g_}, expected {w}"


@pytest.mark.points(1)
def test_cast_report_boundaries(f8):
    fmt = f8.FORMATS["e4m3fn"]
    half = 2.0**-10
    # scale 4: x*4 = 448 (max, not overflow), 449 (overflow), half the smallest subnormal (flushed, tie to even),
    # just above it (subnormal), just below the smallest normal (subnormal), the smallest normal (normal), 0 (nothing)
    x = torch.tensor([112.0, -112.25, half / 4, -half / 4 * (1 + 2**-20), 2.0**-6 / 4 * (1 - 2**-20), 2.0**-6 / 4,
                      0.0, -0.0, float("inf"), float("nan"), 1.0, -3.0e-9], dtype=torch.float32)
    _check_report(f8.cast_report(x, 4.0, fmt), (1 / 12, 2 / 12, 2 / 12, 2 / 12), "e4m3fn hand case")
    _check_report(f8.cast_report(x, torch.tensor(4.0), fmt), (1 / 12, 2 / 12, 2 / 12, 2 / 12), "scale as a tensor")
    # a finite x whose float32 product is inf overflows (it is not "nonfinite": that class is about x)
    big = torch.tensor([3.0e38, -1.0e30, 1.0, float("nan")], dtype=torch.float32)
    _check_report(f8.cast_report(big, 1e10, fmt), (0.75, 0.0, 0.0, 0.25), "finite x, x*scale = inf in float32")
    for name, mx, mn, ms in (E3M2, E2M1):
        other = f8.Fp8Format(name, mx, mn, ms)
        g = torch.Generator().manual_seed(len(name) + int(mx))
        xs = torch.exp(torch.empty(997).uniform_(-6, 4, generator=g)) * torch.sign(torch.randn(997, generator=g))
        xs[::50] = torch.tensor([ms / 2, mx, mn, ms * 0.75] * 5)[: xs[::50].numel()]  # exact boundaries
        _check_report(f8.cast_report(xs, 1.5, other), _report_ref(xs, 1.5, other), f"format {name} (no torch dtype)")
    _check_report(f8.cast_report(torch.empty(0), 2.0, fmt), (0.0, 0.0, 0.0, 0.0), "empty tensor")


@pytest.mark.points(2)
def test_cast_report_agrees_with_torch_casts(f8):
    """The report, decided before the cast, against what torch's cast really does (torch 2.13, CPU)."""
    for i, (name, dtype) in enumerate(f8.DTYPES.items()):
        fmt = f8.FORMATS[name]
        bits = torch.arange(256, dtype=torch.uint8).view(dtype).float()
        pos = bits[torch.isfinite(bits) & (bits > 0)]
        assert (fmt.max, fmt.min_subnormal) == (pos.max().item(), pos.min().item()), f"FORMATS[{name!r}] is wrong"
        for j, (src, scale) in enumerate([(torch.float32, 3.0), (torch.bfloat16, 0.046875), (torch.float32, 1e-3)]):
            g = torch.Generator().manual_seed(100 * i + j)
            n = 4099
            lo, hi = math.log(fmt.min_subnormal / 16 / scale), math.log(fmt.max * 4 / scale)
            x = torch.exp(torch.empty(n, dtype=torch.float64).uniform_(lo, hi, generator=g))
            x = (x * torch.sign(torch.randn(n, generator=g, dtype=torch.float64))).to(src)
            x[7], x[100], x[2000], x[3001] = 0.0, float("inf"), float("nan"), float("-inf")
            before = x.clone()
            where = f"{name}, {src}, scale {scale}"
            got = f8.cast_report(x, scale, fmt)
            assert torch.equal(x.isnan(), before.isnan()) and torch.equal(x.nan_to_num(), before.nan_to_num()), (
                f"{where}: cast_report changed its input")
            _check_report(got, _report_ref(x, scale, fmt), where)
            _check_report(f8.cast_report(x, scale, fmt), tuple(got), f"{where}, second call")
            # what the cast really does with each class (the behaviour the lesson relies on)
            y = x.to(torch.float32) * torch.tensor(scale, dtype=torch.float32)
            q = y.to(dtype).float()
            a, fin = y.abs(), torch.isfinite(x)
            over = fin & (a > fmt.max)
            flushed = fin & (x != 0) & (a <= fmt.min_subnormal / 2)
            assert torch.equal(flushed, fin & (x != 0) & (q == 0)), f"{where}: the flushed set differs from the cast's zeros"
            sub_q = (q != 0) & (q.abs() < fmt.min_normal)
            sub_pre = fin & (a > fmt.min_subnormal / 2) & (a < fmt.min_normal)
            assert not (sub_q & ~sub_pre).any() and (q[sub_pre].abs() <= fmt.min_normal).all(), where
            assert torch.isfinite(q[fin & ~over]).all() and (q[fin & ~over].abs() <= fmt.max).all(), where
            if name == "e4m3fn":  # saturates silently, inf included: only a check before the cast sees the inf
                assert (q[over].abs() == fmt.max).all() and (q[x.isinf()].abs() == fmt.max).all(), where
            elif name == "e5m2":  # IEEE-like: rounds to inf from max + half an ulp on
                assert ((q[over].abs() == fmt.max) | q[over].isinf()).all() and q[x.isinf()].isinf().all(), where
            else:  # fnuz: no inf, overflow and inf become NaN, indistinguishable from a NaN input
                assert ((q[over].abs() == fmt.max) | q[over].isnan()).all() and q[x.isinf()].isnan().all(), where
            assert q[x.isnan()].isnan().all(), where


@pytest.mark.points(1)
def test_delayed_scaling_keeps_underflow_under_bound(f8):
    """Log-normal gradients cast to e5m2 (TE's HYBRID backward format), magnitudes drifting down over 40 steps.
    With delayed scaling ("max", L = 16) at most 0.5 % flush to zero at any step (measured worst over 30 seeds:
    0.06 %) and at most 0.5 % overflow (0.06 %); with scale 1 at least 30 % flush at every step (lowest: 37 %)."""
    fmt = f8.FORMATS["e5m2"]
    g = torch.Generator().manual_seed(2024)
    ds = f8.DelayedScaling(fmt.max, 0, 16, "max")
    for t in range(40):
        grad = torch.exp(-11.0 - 0.05 * t + 2.5 * torch.randn(5003, generator=g))
        grad = (grad * torch.sign(torch.randn(5003, generator=g))).to(torch.bfloat16)
        if t >= 1:  # step 0 runs with the initial scale 1
            scaled, plain = f8.cast_report(grad, ds.scale, fmt), f8.cast_report(grad, 1.0, fmt)
            assert scaled.flushed <= 0.005, f"step {t}: {scaled.flushed:.2%} flushed with scale {float(ds.scale):.4g}"
            assert scaled.overflow <= 0.005, f"step {t}: {scaled.overflow:.2%} overflow with scale {float(ds.scale):.4g}"
            assert plain.flushed >= 0.30, f"step {t}: only {plain.flushed:.2%} flushed with scale 1"
        ds.record(grad)
        ds.update()


# ---------------------------------------------------------------------------------------------------------------------
# NaN origin
# ---------------------------------------------------------------------------------------------------------------------


class Log(nn.Module):
    def forward(self, x):
        return torch.log(x)


class Planted(nn.Module):
    """Registered head, norm, act, proj; executed proj -> act -> norm -> head. act (log of negatives) makes the NaN."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(6, 3)
        self.norm = nn.LayerNorm(6)
        self.act = Log()
        self.proj = nn.Linear(5, 6)

    def forward(self, x):
        return self.head(self.norm(self.act(self.proj(x))))


class Block(nn.Module):
    def __init__(self, d, functional_sqrt=False):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)
        self.functional_sqrt = functional_sqrt

    def forward(self, x):
        h = self.fc1(x)
        if self.functional_sqrt:
            h = torch.sqrt(h)  # a functional op inside the block: the block itself is the origin
        return x + self.fc2(self.act(h))


class Gate(nn.Module):
    def forward(self, x, *, bias):
        return x * torch.sigmoid(bias)


class KwargNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.gate, self.out = nn.Linear(4, 4), Gate(), nn.Linear(4, 2)

    def forward(self, x):
        h = self.inp(x)
        return self.out(self.gate(h, bias=torch.log(h)))  # NaN made in this forward, handed over as a keyword


class Router(nn.Module):
    def forward(self, x):
        return x.softmax(-1), torch.log(x - 10.0)  # second output non-finite


class TupleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre, self.router = nn.Linear(3, 3), Router()

    def forward(self, x):
        probs, aux = self.router(self.pre(x))
        return {"probs": probs, "aux": aux}


def _blocks(n, d, seed, culprit, how):
    torch.manual_seed(seed)
    model = nn.Sequential(*[Block(d, functional_sqrt=(how == "sqrt" and i == culprit)) for i in range(n)])
    if how == "inf":
        with torch.no_grad():
            model[culprit].fc1.weight[0, 0] = float("inf")
    elif how == "huge":  # finite weights, float32 overflow to inf (no NaN)
        with torch.no_grad():
            model[culprit].fc2.weight.mul_(1e36)
    return model


def _no_hooks(model):
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.points(2)
def test_nan_origin_is_the_first_module_to_finish_with_non_finite_output(f8):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(1)
    model = Planted()
    x = torch.randn(4, 5, generator=g)
    assert f8.find_nan_origin(model, x) == "act", "execution order proj -> act -> norm -> head; act makes the NaN"
    for n, d, culprit, how, want in [(6, 7, 3, "inf", "3.fc1"), (5, 3, 0, "inf", "0.fc1"), (7, 5, 6, "huge", "6.fc2"),
                                     (4, 9, 2, "huge", "2.fc2")]:
        model = _blocks(n, d, 10 + culprit, culprit, how)
        x = torch.randn(3, d, generator=g) * (1e4 if how == "huge" else 1.0)
        out = model(x)
        assert not torch.isfinite(out).all()
        got = f8.find_nan_origin(model, x)
        assert got == want, f"{n} blocks, culprit block {culprit} ({how}): got {got!r}, expected {want!r}"
    model = TupleNet()
    assert f8.find_nan_origin(model, torch.rand(2, 3, generator=g)) == "router", "a non-finite SECOND output counts"


@pytest.mark.points(1)
def test_nan_origin_needs_finite_inputs(f8):
    g = torch.Generator().manual_seed(3)
    for culprit in (1, 4):
        model = _blocks(6, 5, 20 + culprit, culprit, "sqrt")
        x = torch.randn(8, 5, generator=g)
        got = f8.find_nan_origin(model, x)
        assert got == str(culprit), (
            f"block {culprit} applies torch.sqrt to negatives in its own forward: its fc2 only receives the NaN; "
            f"got {got!r}, expected {str(culprit)!r}")
    got = f8.find_nan_origin(KwargNet(), torch.randn(5, 4, generator=g))
    assert got == "", f"the root's forward makes the NaN and passes it as a keyword argument; got {got!r}, expected ''"
    model = _blocks(3, 4, 7, 0, "none")
    x = torch.randn(2, 4, generator=g)
    assert f8.find_nan_origin(model, x) is None, "all finite: None"
    x[1, 2] = float("nan")
    assert f8.find_nan_origin(model, x) is None, "the input was already NaN: no module made it"


@pytest.mark.points(1)
def test_nan_origin_leaves_the_model_as_it_was(f8):
    g = torch.Generator().manual_seed(4)
    model = _blocks(5, 6, 30, 2, "inf")
    x = torch.randn(3, 6, generator=g)
    seen = []
    user = model[1].register_forward_hook(lambda m, i, o: seen.append(o.clone()))
    before = model(x).clone()
    assert f8.find_nan_origin(model, x) == "2.fc1"
    assert f8.find_nan_origin(model, x) == "2.fc1", "second call"
    assert len(model[1]._forward_hooks) == 1 and len(seen) == 3, "the user's own hook must survive and still fire"
    user.remove()
    assert _no_hooks(model), "find_nan_origin must remove every hook it registered"
    assert _same(model(x), before), "the model's output changed"
    assert _same(seen[1], seen[0]), "the hooks changed a module's output during the search"

    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = nn.Sequential(nn.Linear(3, 3), Boom())
    with pytest.raises(RuntimeError, match="boom"):
        f8.find_nan_origin(model, torch.randn(2, 3, generator=g))
    assert _no_hooks(model), "hooks must be removed when the forward raises"
