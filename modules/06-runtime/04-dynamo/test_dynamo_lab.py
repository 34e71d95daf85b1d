"""Tests for runtime-04 (TorchDynamo). Oracles: torch._dynamo.explain (graphs, graph and break counts),
torch._dynamo.testing.CompileCounter (frames compiled), and the eager run of the given `route`.

Tolerance (fp32): route and route_fixed differ only in where CLIP / peak is rounded (double then fp32 vs fp32)
and in the std formula: a few ulp of O(1) values, so rtol = 1e-5, atol = 1e-6.
"""


import pytest
import torch
import torch._dynamo as dynamo
from torch._dynamo.testing import CompileCounter

TOL = {"rtol": 1e-5, "atol": 1e-6}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every test starts and ends with empty Dynamo caches: no graph or guard leaks between cases.
    One intra-op thread: the tensors are tiny, and thread hand-offs dominate on a loaded 2-core runner."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    dynamo.reset()
    yield
    dynamo.reset()
    torch.set_num_threads(threads)


def _names(gm):
    """Oracle for op_names: the same rule written independently."""
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function":
            out.append(n.target.__name__)
        elif n.op == "call_method":
            out.append(n.target)
        elif n.op == "call_module":
            out.append(type(gm.get_submodule(n.target)).__name__)
    return out


def _router_inputs(g, T, E, branch):
    """scores/bias with a chosen sign of logits.mean() (branch = +1 / -1) and a random spread around CLIP."""
    spread = float(torch.empty(()).uniform_(0.2, 6.0, generator=g))
    s = torch.randn(T, E, generator=g) * spread
    b = torch.randn(E, generator=g)
    shift = (s + b).mean() - branch * float(torch.empty(()).uniform_(0.05, 2.0, generator=g))
    return s - shift, b


def _cases(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        T, E = int(torch.randint(1, 40, (), generator=g)), int(torch.randint(1, 17, (), generator=g))
        yield _router_inputs(g, T, E, 1 if i % 2 else -1), float(torch.empty(()).uniform_(0.3, 2.0, generator=g))


# ------------------------------------------------------------------------------------------------ the backend


def _with_breaks(x, w):
    y = torch.relu(x @ w) + 1
    z = y.sin()
    print("between the graphs")
    return torch.nn.functional.gelu(z).sum(dim=0)


def _one_graph(x, w):
    return torch.tanh(x @ w).cos().mean(dim=-1)


class _Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 0.5))

    def forward(self, x):
        return (torch.relu(self.proj(x)) * self.scale).sum(dim=-1)


def test_op_names_of_module_calls_and_attributes(lesson):
    # fx.symbolic_trace keeps submodules as call_module nodes (Dynamo inlines them) and buffers as get_attr nodes:
    # a module call is named by its class, a get_attr fetches a tensor and is not an op
    mod = lesson.load("dynamo_lab.py")
    gm = torch.fx.symbolic_trace(_Head())
    assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_module", "call_function", "get_attr",
                                              "call_function", "call_method", "output"]
    assert mod.op_names(gm) == _names(gm) == ["Linear", "relu", "mul", "sum"]


def test_recorder_worked_example(lesson, capsys):
    mod = lesson.load("dynamo_lab.py")
    rec = mod.GraphRecorder()
    f = torch.compile(_with_breaks, backend=rec)
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    torch.testing.assert_close(f(x, w), _with_breaks(x, w))
    assert rec.graph_count == 2, "print splits _with_breaks into two graphs"
    assert rec.ops == [["matmul", "relu", "add", "sin"], ["gelu", "sum"]]
    assert all(isinstance(gm, torch.fx.GraphModule) for gm in rec.graphs)


@pytest.mark.points(2)
@pytest.mark.parametrize("fn", ["_one_graph", "_with_breaks", "route"])
def test_recorder_sees_what_explain_sees(lesson, fn, capsys):
    mod = lesson.load("dynamo_lab.py")
    func = getattr(mod, fn, None) or globals()[fn]
    g = torch.Generator().manual_seed(1)
    args = _router_inputs(g, 9, 6, 1) + (0.8,) if fn == "route" else (torch.randn(5, 3), torch.randn(3, 4))
    expected = dynamo.explain(func)(*args)
    dynamo.reset()
    rec = mod.GraphRecorder()
    torch.testing.assert_close(torch.compile(func, backend=rec)(*args), func(*args), **TOL)
    assert rec.graph_count == expected.graph_count
    assert rec.ops == [_names(gm) for gm in expected.graphs]
    assert [mod.op_names(gm) for gm in expected.graphs] == rec.ops


@pytest.mark.points(2)
def test_recorder_runs_the_call_inputs_not_the_example_inputs(lesson, capsys):
    # the second and third calls hit the guards (same shapes): no new graph, and the result must be of THEIR inputs
    mod = lesson.load("dynamo_lab.py")
    rec = mod.GraphRecorder()
    f = torch.compile(_with_breaks, backend=rec)
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        x, w = torch.randn(6, 5, generator=g), torch.randn(5, 3, generator=g)
        torch.testing.assert_close(f(x, w), _with_breaks(x, w), **TOL)
    assert rec.graph_count == 2, "guard hits must reuse the compiled graphs"


# ------------------------------------------------------------------------------------------------ the rewrite


@pytest.mark.points(2)
def test_fixed_equals_route_eager(lesson, capsys):
    mod = lesson.load("dynamo_lab.py")
    branches = set()
    for (s, b), temp in _cases(300):
        want = mod.route(s, b, temp)
        s0, b0 = s.clone(), b.clone()
        got = mod.route_fixed(s, b, temp)
        torch.testing.assert_close(got, want, **TOL)
        assert torch.equal(s, s0) and torch.equal(b, b0), "route_fixed modified its inputs"
        branches.add(((s + b).mean() > 0).item())
    assert branches == {True, False}
    # edge cases: all-zero logits (peak 0: CLIP / peak is inf; mean exactly 0 takes the sigmoid branch), peak exactly
    # CLIP, one token, one expert, and 4 equal positive logits (softmax gives exactly 0.25: the load threshold is strict)
    for s, b in ((torch.zeros(4, 3), torch.zeros(3)), (torch.tensor([[4.0, -1.0, 0.5]]), torch.zeros(3)),
                 (torch.full((1, 1), -9.0), torch.full((1,), 0.5)), (torch.randn(5, 1) * 10, torch.zeros(1)),
                 (torch.ones(3, 4), torch.zeros(4))):
        torch.testing.assert_close(mod.route_fixed(s, b, 0.7), mod.route(s, b, 0.7), **TOL)


def _opaque_calls(gm, learner_module):
    """call_function targets that hide computation from the graph: learner functions put in with allow_in_graph,
    custom ops outside aten/prims."""
    bad = []
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        if getattr(t, "__module__", None) == learner_module:
            bad.append(n.target.__name__)
        if isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) and t.namespace not in ("aten", "prims"):
            bad.append(str(t))
    return bad


@pytest.mark.points(3)
def test_fixed_is_one_graph_for_both_branches(lesson, capsys):
    mod = lesson.load("dynamo_lab.py")
    g = torch.Generator().manual_seed(3)
    for branch in (1, -1):
        s, b = _router_inputs(g, 12, 8, branch)
        dynamo.reset()
        e = dynamo.explain(mod.route_fixed)(s, b, 0.7)
        reasons = [r.reason.splitlines()[0] for r in e.break_reasons]
        assert (e.graph_count, e.graph_break_count) == (1, 0), f"graph breaks: {reasons}"
        assert not _opaque_calls(e.graphs[0], mod.__name__), "the computation must be traced, not hidden in one call"


@pytest.mark.points(2)
def test_fixed_compiles_once_for_every_input_of_a_shape(lesson, capsys):
    mod = lesson.load("dynamo_lab.py")
    cnt = CompileCounter()
    f = torch.compile(mod.route_fixed, backend=cnt, fullgraph=True)
    g = torch.Generator().manual_seed(4)
    for i in range(8):  # branch flips and peaks above and below CLIP: none of it may reach a guard
        s, b = _router_inputs(g, 10, 6, 1 if i % 2 else -1)
        s = s * (0.1 if i % 4 < 2 else 3.0)
        torch.testing.assert_close(f(s, b, 0.7), mod.route(s, b, 0.7), **TOL)
    assert cnt.frame_count == 1, f"{cnt.frame_count} frames compiled for one input shape"
    assert cnt.op_count > 0
