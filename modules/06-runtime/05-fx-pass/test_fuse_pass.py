"""Tests for runtime-05 (FX pass: matmul + bias + activation -> one fused call). Oracles: the eager model
(outputs and gradients) and the rewritten ATen graph itself (fused nodes counted, activation names read
from the nodes), built through Dynamo + AOTAutograd with the lesson's backend (no Inductor).

Tolerance (fp32, K <= 40): the fused call computes addmm(b, x, w), the model may compute mm then add: the same
products and sums up to one extra rounding of the bias add, |error| <~ K * 2^-24 * |x||w|, so rtol = atol = 1e-5.
"""

import pytest
import torch
import torch._dynamo as dynamo
import torch.nn as nn
import torch.nn.functional as F

TOL = {"rtol": 1e-5, "atol": 1e-5}
POSITIVE = ("linear_relu", "linear_gelu", "addmm_gelu_tanh", "mm_add_relu", "bias_first_gelu_tanh", "act_used_twice")
NEGATIVE = ("pre_used_twice", "mm_used_twice", "row_bias", "residual", "addmm_beta", "sigmoid", "two_d_bias_addmm")
# more forms the docstring excludes: alpha on add / addmm, a bias that is 1-D but not N long, a Python-scalar
# addend (no FakeTensor), and add(h, b) where h is not a matmul (a scaled product)
NEGATIVE_MORE = ("add_alpha", "addmm_alpha", "length_one_bias", "scalar_addend", "scaled_product")
ACT_OF = {"linear_relu": "relu", "linear_gelu": "gelu", "addmm_gelu_tanh": "gelu_tanh", "mm_add_relu": "relu",
          "bias_first_gelu_tanh": "gelu_tanh", "act_used_twice": "relu"}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: thread hand-offs dominate on a loaded 2-core runner
    dynamo.reset()
    yield
    dynamo.reset()
    torch.set_num_threads(threads)


class Block(nn.Module):
    """One [M, K] -> [M, N] step written in one of the styles below (None: the output width of the block)."""

    def __init__(self, kind, k, n, g):
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.randn(n, k, generator=g) / k**0.5)  # [N, K] like nn.Linear
        self.bias = nn.Parameter(torch.randn(n, generator=g))

    def forward(self, x):
        W, b, kind = self.weight, self.bias, self.kind
        w = W.t()
        if kind == "linear_relu":
            return F.relu(F.linear(x, W, b))
        if kind == "linear_gelu":
            return F.gelu(F.linear(x, W, b))
        if kind == "addmm_gelu_tanh":
            return F.gelu(torch.addmm(b, x, w), approximate="tanh")
        if kind == "mm_add_relu":
            return torch.relu(x @ w + b)
        if kind == "bias_first_gelu_tanh":
            return F.gelu(b + torch.mm(x, w), approximate="tanh")
        if kind == "act_used_twice":  # the activation's output may be read many times: still one fused call
            a = torch.relu(F.linear(x, W, b))
            return a * 0.5 + a
        if kind == "pre_used_twice":  # the pre-activation h is needed again: must stay
            h = F.linear(x, W, b)
            return torch.relu(h) - 0.25 * h
        if kind == "mm_used_twice":  # the product itself is needed again
            m = x @ w
            return F.gelu(m + b) + 0.1 * m
        if kind == "row_bias":  # one bias per ROW, broadcast along the other dim
            c = b.sum() * torch.arange(x.shape[0], dtype=x.dtype) / x.shape[0]
            return torch.relu(x @ w + c[:, None])
        if kind == "residual":  # a full [M, N] addend is not a bias
            r = torch.cos(x[:, :1]) * b
            return torch.relu(x @ w + r)
        if kind == "addmm_beta":  # beta != 1 scales the bias
            return torch.relu(torch.addmm(b, x, w, beta=0.5))
        if kind == "sigmoid":  # not an activation of the table
            return torch.sigmoid(F.linear(x, W, b))
        if kind == "two_d_bias_addmm":  # addmm's input broadcast from [1, N]: not a 1-D bias
            return torch.relu(torch.addmm(b[None, :], x, w))
        if kind == "add_alpha":  # add(mm, b, alpha=2) adds 2 b
            return torch.relu(torch.add(x @ w, b, alpha=2.0))
        if kind == "addmm_alpha":  # alpha != 1 scales the product
            return torch.relu(torch.addmm(b, x, w, alpha=2.0))
        if kind == "length_one_bias":  # 1-D, but one element broadcast over all N columns
            return torch.relu(x @ w + b[:1])
        if kind == "scalar_addend":  # a Python float: no FakeTensor, not a bias tensor
            return torch.relu(x @ w + 0.5)
        if kind == "scaled_product":  # add(h, b) with h = mm * per-column scale: h is not a matmul
            return torch.relu((x @ w) * torch.sigmoid(b)[None, :] + b)
        raise ValueError(kind)


class Chain(nn.Module):
    def __init__(self, kinds, widths, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.blocks = nn.ModuleList(Block(kd, widths[i], widths[i + 1], g) for i, kd in enumerate(kinds))

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return x


def _compile(mod, model):
    record = []
    return torch.compile(model, backend=mod.fusing_backend(record)), record


def _fused_nodes(mod, gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is mod.fused_linear_act]


def _unfused_blocks(gm):
    """Activations still fed directly by addmm / add(mm, .): fusable ones left over are caught by the counts."""
    aten = torch.ops.aten
    acts = (aten.relu.default, aten.gelu.default)
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in acts
            and isinstance(n.args[0], torch.fx.Node) and n.args[0].target in (aten.addmm.default, aten.add.Tensor)]


def _run(mod, kinds, M=7, seed=0, widths=None):
    g = torch.Generator().manual_seed(seed + 100)
    widths = widths or [int(w) for w in torch.randint(3, 40, (len(kinds) + 1,), generator=g)]
    model = Chain(kinds, widths, seed)
    x = torch.randn(M, widths[0], generator=g)
    compiled, record = _compile(mod, model)
    with torch.no_grad():
        got, want = compiled(x), model(x)
    torch.testing.assert_close(got, want, **TOL)
    assert len(record) == 1, "one forward graph expected (no graph breaks in these models)"
    gm, n = record[0]
    # the generated code must call the fused function as often as the graph holds it
    assert gm.code.count("fused_linear_act(") == len(_fused_nodes(mod, gm)), "gm.forward does not run the edited graph"
    return gm, n


def test_pass_recompiles_an_already_compiled_graph_module(lesson):
    # AOTAutograd hands the backend a lazily compiled GraphModule, whose first call would pick up an edited graph
    # even without recompile(). A GraphModule that already generated its code must run the NEW graph after the
    # pass: gm.code calls fused_linear_act and the outputs are the model's. A second pass finds nothing more.
    import torch.fx as fx
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    mod = lesson.load("fuse_pass.py")
    captured, seen = [], []

    def capture(gm, example_inputs):
        captured.append(gm)
        run = make_boxed_func(gm.forward)

        def record_args(args):
            seen.append(list(args))  # the real inputs of the graph, in placeholder order
            return run(args)

        record_args._boxed_call = True
        return record_args

    model = Chain(["linear_relu", "mm_add_relu", "sigmoid"], [5, 9, 6, 4], seed=7)
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        torch.compile(model, backend=aot_autograd(fw_compiler=capture))(x)
        want = model(x)
    plain = fx.GraphModule(captured[0], captured[0].graph)  # a plain GraphModule: its code is generated now
    args = seen[0]
    with torch.no_grad():
        torch.testing.assert_close(plain(*args)[0], want, **TOL)
        n = mod.fuse_linear_activation(plain)
        assert n == len(_fused_nodes(mod, plain)) == 2, f"returned {n}, expected the 2 relu blocks"
        assert plain.code.count("fused_linear_act(") == 2, "the graph was edited but gm.forward still runs the old code"
        torch.testing.assert_close(plain(*args)[0], want, **TOL)
        assert mod.fuse_linear_activation(plain) == 0, "a second pass over the rewritten graph must replace nothing"


@pytest.mark.points(2)
@pytest.mark.parametrize("kind", NEGATIVE_MORE)
def test_excluded_forms_are_left_alone(lesson, kind):
    # alpha on add/addmm, a [1] bias, a scalar addend, a scaled product under the add: each must stay as it is
    mod = lesson.load("fuse_pass.py")
    gm, n = _run(mod, [kind], seed=30 + NEGATIVE_MORE.index(kind))
    assert n == len(_fused_nodes(mod, gm)) == 0, f"{kind} must not be replaced (returned {n})"


@pytest.mark.points(2)
@pytest.mark.parametrize("kind", POSITIVE)
def test_each_pattern_is_fused_with_its_activation(lesson, kind):
    mod = lesson.load("fuse_pass.py")
    gm, n = _run(mod, [kind], seed=POSITIVE.index(kind))
    fused = _fused_nodes(mod, gm)
    assert n == len(fused) == 1, f"{kind}: returned {n}, graph holds {len(fused)} fused calls, expected 1"
    assert fused[0].args[3] == ACT_OF[kind], f"{kind}: activation {fused[0].args[3]!r}, expected {ACT_OF[kind]!r}"
    for op in ("addmm", "mm"):
        assert not any(getattr(nd.target, "__name__", "").startswith(op + ".") for nd in gm.graph.nodes), \
            f"{kind}: the replaced aten.{op} is still in the graph"


@pytest.mark.points(2)
@pytest.mark.parametrize("kind", NEGATIVE)
def test_non_matching_patterns_are_left_alone(lesson, kind):
    mod = lesson.load("fuse_pass.py")
    gm, n = _run(mod, [kind], seed=10 + NEGATIVE.index(kind))
    assert n == len(_fused_nodes(mod, gm)) == 0, f"{kind} must not be replaced (returned {n})"


@pytest.mark.points(3)
@pytest.mark.parametrize("seed", range(6))
def test_k_blocks_mixed_with_non_matching_ones(lesson, seed):
    mod = lesson.load("fuse_pass.py")
    g = torch.Generator().manual_seed(seed)
    k = 1 + seed % 4
    kinds = [POSITIVE[int(i)] for i in torch.randint(0, len(POSITIVE), (k,), generator=g)]
    kinds += [NEGATIVE[int(i)] for i in torch.randint(0, len(NEGATIVE), (seed % 3,), generator=g)]
    kinds = [kinds[int(i)] for i in torch.randperm(len(kinds), generator=g)]
    M = (1, 2, 7, 33, 5, 64)[seed]  # M = 1: a single row
    gm, n = _run(mod, kinds, M=M, seed=seed)
    assert n == len(_fused_nodes(mod, gm)) == k, f"{kinds}: {n} replaced, expected {k}"
    left = [nd.name for nd in _unfused_blocks(gm)]
    expect_left = sum(kd in NEGATIVE and kd != "sigmoid" for kd in kinds)
    assert len(left) == expect_left, f"{kinds}: unfused matmul+activation nodes {left}"


def test_square_weights_do_not_confuse_the_bias_check(lesson):
    # M == N == K: a row bias [M, 1] and a [1, N] addmm input have the same sizes as a column bias would
    mod = lesson.load("fuse_pass.py")
    gm, n = _run(mod, ["row_bias", "linear_relu", "two_d_bias_addmm", "mm_add_relu"], M=9, widths=[9] * 5)
    assert n == len(_fused_nodes(mod, gm)) == 2


@pytest.mark.points(2)
def test_training_graph_keeps_saved_pre_activations(lesson):
    # With grad, AOTAutograd saves gelu's INPUT for the backward (a second user of the addmm): not fusable.
    # relu saves its OUTPUT, so relu blocks still fuse. Forward and gradients must equal eager.
    mod = lesson.load("fuse_pass.py")
    kinds = ["linear_relu", "linear_gelu", "mm_add_relu", "addmm_gelu_tanh"]
    model = Chain(kinds, [6, 11, 13, 5, 8], seed=3)
    x = torch.randn(9, 6, generator=torch.Generator().manual_seed(4), requires_grad=True)
    compiled, record = _compile(mod, model)
    out = compiled(x)
    out.pow(2).sum().backward()
    grads = [p.grad.clone() for p in (x, *model.parameters())]
    x.grad = None
    model.zero_grad()
    ref = model(x)
    ref.pow(2).sum().backward()
    torch.testing.assert_close(out, ref, **TOL)
    for got, want in zip(grads, (x.grad, *(p.grad for p in model.parameters()))):
        torch.testing.assert_close(got, want, **TOL)
    gm, n = record[0]
    assert n == len(_fused_nodes(mod, gm)) == 2, f"{n} replaced in the training graph, expected the 2 relu blocks"
