"""Tests for infer-09: the learner's TopKSoftmax OpenVINO Op through its whole lifecycle.

Oracles: a float64 numpy top-k softmax; OpenVINO's own shape inference on the model before compile (output partial
shapes and element types, as OpenVINO prints them); the CPU plugin compiling and running the graph with
INFERENCE_PRECISION_HINT=f32, with output tensors poisoned before each run; ov.save_model / core.read_model for the
attributes; a counting wrapper around clone_with_new_inputs.
Tolerance: weights rtol 1e-5, atol 1e-7. The plugin hands evaluate float32 logits; a float32 softmax (one rounding in
the max-subtraction, exp and a sum of <= 64 terms) stays within a few 1e-7 of the float64 reference, and every real
bug (wrong row, wrong expert, missing renormalisation, overflow) is off by far more. Indices must match exactly:
the logits are drawn with gaps >= 1e-3 between experts, so there are no ties.
"""

import xml.etree.ElementTree as ET

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
ops = pytest.importorskip("openvino.opset13")

CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
NP_INDEX = {"i32": np.int32, "i64": np.int64}


@pytest.fixture
def mod(lesson):
    return lesson.load("topk_softmax_op.py")


def reference(x, k, renormalize):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    w = np.take_along_axis(p, idx, axis=-1)
    if renormalize:
        w = w / w.sum(axis=-1, keepdims=True)
    return w, idx


def logits(rng, shape, offset=0.0):
    """float32 logits whose experts differ by >= 1e-3 within every row (no ties), plus `offset`."""
    x = rng.standard_normal(shape) * 2.0
    rows = x.reshape(-1, shape[-1])
    for r in rows:
        while shape[-1] > 1 and np.diff(np.sort(r)).min() < 1e-3:
            r[:] = rng.standard_normal(shape[-1]) * 2.0
    return (x + offset).astype(np.float32)


def build(mod, shape, et=ov.Type.f32, **attrs):
    p = ops.parameter(shape, et)
    op = mod.TopKSoftmax([p.output(0)], **attrs)
    return ov.Model(op.outputs(), [p]), op


def run(compiled, x):
    """One inference with both output tensors poisoned first (static output shapes only)."""
    req = compiled.create_infer_request()
    for i, out in enumerate(compiled.outputs):
        shape = out.get_partial_shape()
        if shape.is_static:
            buf = np.full(shape.to_shape(), np.nan if i == 0 else -7, dtype=out.get_element_type().to_dtype())
            req.set_output_tensor(i, ov.Tensor(buf))
    req.infer({0: x})
    return req.get_output_tensor(0).data.copy(), req.get_output_tensor(1).data.copy()


def check(compiled, x, k, renormalize, index_type, where):
    w, idx = run(compiled, x)
    want_w, want_idx = reference(x, k, renormalize)
    assert w.shape == want_w.shape and idx.shape == want_idx.shape, (
        f"{where}: output shapes {w.shape}, {idx.shape}; expected {want_w.shape}")
    assert idx.dtype == NP_INDEX[index_type], f"{where}: indices come back as {idx.dtype}, expected {index_type}"
    assert np.array_equal(idx, want_idx), f"{where}: indices\n{idx}\nexpected\n{want_idx}"
    np.testing.assert_allclose(w, want_w, rtol=1e-5, atol=1e-7, err_msg=f"{where}: weights")


SHAPE_CASES = [  # input shape, element type, attributes, expected output shape (as OpenVINO prints it)
    ([5, 8], ov.Type.f32, dict(k=3), "[5,3]"),
    ([-1, 7], ov.Type.f16, dict(k=7, index_type="i64"), "[?,7]"),
    ([2, ov.Dimension(2, 10), 6], ov.Type.f32, dict(k=1, renormalize=True), "[2,2..10,1]"),
    ([3, -1], ov.Type.f32, dict(k=4), "[3,4]"),
    ([9], ov.Type.f64, dict(k=2, index_type="i64"), "[2]"),
    ([-1, ov.Dimension(1, 4), 5, 33], ov.Type.f32, dict(k=5), "[?,1..4,5,5]"),
    (ov.PartialShape.dynamic(), ov.Type.f32, dict(k=2), "[...]"),
]


@pytest.mark.points(1)
def test_shapes_and_types_are_inferred_before_compile(mod):
    for shape, et, attrs, want in SHAPE_CASES:
        model, _ = build(mod, shape, et, **attrs)
        where = f"input {shape} {et}, {attrs}"
        index_type = INDEX_TYPE[attrs.get("index_type", "i32")]
        got = [(str(o.get_partial_shape()), o.get_element_type()) for o in model.outputs]
        assert got == [(want, et), (want, index_type)], f"{where}: outputs {got}, expected {want} ({et}, {index_type})"
    bad = [([4, 3], ov.Type.f32, dict(k=4), "k > E"), ([4, 3], ov.Type.f32, dict(k=0), "k = 0"),
           ([], ov.Type.f32, dict(k=1), "rank-0 logits"), ([4, 6], ov.Type.i32, dict(k=2), "integer logits"),
           ([4, 6], ov.Type.f32, dict(k=2, index_type="u8"), "unknown index_type"),
           ([9, 2, 3], ov.Type.f32, dict(k=4), "k > E with larger leading dims")]
    for shape, et, attrs, why in bad:
        with pytest.raises(Exception):  # noqa: B017  (OpenVINO wraps what the op raises)
            build(mod, shape, et, **attrs)
            pytest.fail(f"{why}: building TopKSoftmax on {shape} {et} with {attrs} must fail in shape inference")


INDEX_TYPE = {"i32": ov.Type.i32, "i64": ov.Type.i64}
RUN_CASES = [  # shape, attributes, offset of the logits
    ((1, 1), dict(k=1), 0.0),
    ((5, 7), dict(k=3), 0.0),
    ((3, 4, 16), dict(k=4, renormalize=True), 0.0),
    ((2, 1, 64), dict(k=8, index_type="i64"), 0.0),
    ((6, 9), dict(k=9, renormalize=True), 0.0),
    ((13, 5), dict(k=2, renormalize=True, index_type="i64"), 1e4),
    ((4, 12), dict(k=3), 1e4),
]


@pytest.mark.points(1)
def test_compiled_static_graphs_match_float64(mod):
    rng = np.random.default_rng(9)
    core = ov.Core()
    for shape, attrs, offset in RUN_CASES:
        model, _ = build(mod, list(shape), **attrs)
        compiled = core.compile_model(model, "CPU", CONFIG)
        x = logits(rng, shape, offset)
        check(compiled, x, attrs["k"], attrs.get("renormalize", False), attrs.get("index_type", "i32"),
              f"static {shape}, {attrs}, logits around {offset}")


@pytest.mark.points(1)
def test_dynamic_graph_runs_at_new_shapes_and_after_reshape(mod):
    rng = np.random.default_rng(10)
    core = ov.Core()
    model, _ = build(mod, [-1, -1], k=3, renormalize=True, index_type="i64")
    compiled = core.compile_model(model, "CPU", CONFIG)
    for shape in [(1, 3), (4, 11), (7, 5), (2, 40)]:
        check(compiled, logits(rng, shape), 3, True, "i64", f"dynamic [?,?] run at {shape}")
    model.reshape([5, 9])  # shape inference runs again on the op, now with static input dims
    got = [str(o.get_partial_shape()) for o in model.outputs]
    assert got == ["[5,3]", "[5,3]"], f"after model.reshape([5, 9]) the outputs are {got}, expected [5,3] twice"
    compiled = core.compile_model(model, "CPU", CONFIG)
    check(compiled, logits(rng, (5, 9), 1e4), 3, True, "i64", "reshaped to [5, 9]")
    model, _ = build(mod, [-1, -1, 6], k=2)
    compiled = core.compile_model(model, "CPU", CONFIG)
    for shape in [(2, 3, 6), (1, 7, 6)]:
        check(compiled, logits(rng, shape), 2, False, "i32", f"dynamic [?,?,6] run at {shape}")


@pytest.mark.points(1)
def test_compile_clones_the_op_with_its_current_attributes(mod, monkeypatch):
    """The attributes are changed after construction: a clone must copy what the node holds now."""
    clones = []
    original = mod.TopKSoftmax.clone_with_new_inputs

    def counting_clone(self, new_inputs):
        c = original(self, new_inputs)
        clones.append((self, c))
        return c

    monkeypatch.setattr(mod.TopKSoftmax, "clone_with_new_inputs", counting_clone)
    rng = np.random.default_rng(11)
    model, op = build(mod, [-1, 10])
    op.k, op.renormalize, op.index_type = 4, True, "i64"
    op.validate_and_infer_types()
    model.validate_nodes_and_infer_types()
    got = [(str(o.get_partial_shape()), o.get_element_type()) for o in model.outputs]
    assert got == [("[?,4]", ov.Type.f32), ("[?,4]", ov.Type.i64)], f"after changing the attributes: {got}"
    compiled = ov.Core().compile_model(model, "CPU", CONFIG)
    assert clones, "compile_model never called clone_with_new_inputs: the plugin must work on a copy of the graph"
    for src, c in clones:
        assert c is not src, "clone_with_new_inputs returned the node itself, not a new node"
        assert (c.k, c.renormalize, c.index_type) == (4, True, "i64"), (
            f"a clone has k={c.k}, renormalize={c.renormalize}, index_type={c.index_type!r}; the node has 4, True, 'i64'")
    for shape in [(3, 10), (8, 10)]:
        check(compiled, logits(rng, shape), 4, True, "i64", f"changed attributes, run at {shape}")


@pytest.mark.points(1)
def test_attributes_survive_save_and_read_model(mod, tmp_path):
    rng = np.random.default_rng(12)
    model, _ = build(mod, [-1, 10], k=3, renormalize=True, index_type="i64")
    xml = tmp_path / "topk.xml"
    ov.save_model(model, xml)
    layers = [e for e in ET.parse(xml).iter("layer") if e.get("type") == "TopKSoftmax"]
    assert len(layers) == 1, "the saved IR holds no TopKSoftmax layer"
    data = layers[0].find("data")
    stored = {} if data is None else dict(data.attrib)
    assert stored == {"k": "3", "renormalize": "true", "index_type": "i64"}, f"attributes in the IR: {stored}"
    core = ov.Core()
    core.add_extension(mod.TopKSoftmax)
    for attrs in (dict(k=3, renormalize=True, index_type="i64"), dict(k=5, renormalize=False, index_type="i32")):
        model, _ = build(mod, [-1, 10], **attrs)
        ov.save_model(model, xml)
        loaded = core.read_model(xml)
        got = [(str(o.get_partial_shape()), o.get_element_type()) for o in loaded.outputs]
        k = attrs["k"]
        want = [(f"[?,{k}]", ov.Type.f32), (f"[?,{k}]", INDEX_TYPE[attrs["index_type"]])]
        assert got == want, f"read_model of an op saved with {attrs}: outputs {got}, expected {want}"
        compiled = core.compile_model(loaded, "CPU", CONFIG)
        check(compiled, logits(rng, (6, 10)), k, attrs["renormalize"], attrs["index_type"], f"read back {attrs}")
