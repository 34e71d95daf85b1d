"""infer-09: an MoE router's fused top-k softmax as an OpenVINO custom `Op` (the plugin lifecycle on a CPU runtime).

`TopKSoftmax(inputs=[logits], k, renormalize, index_type)` -> (weights, indices):

    p       = softmax(logits, axis=-1)                 # over all E experts of each row
    indices = the k largest entries of p, largest first (no ties in the tests)
    weights = p[indices]; if renormalize: weights /= weights.sum(-1)

Contract, phase by phase (the TensorRT 10 IPluginV3 method each phase plays is in the README):
- validate_and_infer_types (build time, before any data exists): logits must have a static rank >= 1 or a dynamic rank,
  and a real (floating-point) element type; k >= 1; a static last dimension E must satisfy k <= E. Output 0: logits'
  element type, output 1: INDEX_TYPES[index_type]; both shaped logits.shape[:-1] + [k], keeping every leading dimension
  as it is (static, dynamic `?`, or an interval `2..10`); a dynamic-rank input gives dynamic-rank outputs.
  Violations raise an exception.
- clone_with_new_inputs: the compiler copies nodes while it transforms the graph; the copy must carry every attribute.
- visit_attributes: one visitor call with all attributes; serialisation reads them from the dict, deserialisation
  (core.read_model) writes the stored values into the same dict, and the op must take them from there.
- evaluate (run time): write both outputs for the concrete input shape. Rows may hold logits near 1e4.
"""

import numpy as np
import openvino as ov
from openvino import Op

INDEX_TYPES = {"i32": ov.Type.i32, "i64": ov.Type.i64}


class TopKSoftmax(Op):
    class_type_info = ov.DiscreteTypeInfo("TopKSoftmax", "hpccourse")

    def __init__(self, inputs=None, k: int = 2, renormalize: bool = False, index_type: str = "i32") -> None:
        super().__init__(self)  # no inputs yet: the attributes must exist before the first validate_and_infer_types
        self.k, self.renormalize, self.index_type = k, renormalize, index_type
        if inputs is not None:
            self.set_arguments(inputs)
            self.constructor_validate_and_infer_types()

    def get_type_info(self) -> ov.DiscreteTypeInfo:
        return TopKSoftmax.class_type_info

    def validate_and_infer_types(self) -> None:
        ### HINT: ov.PartialShape is iterable (one ov.Dimension per axis); Dimension.is_static / get_length(); keep the leading dims
        ### BEGIN SOLUTION
        if self.k < 1 or self.index_type not in INDEX_TYPES:
            raise ValueError(f"TopKSoftmax: bad attributes k={self.k}, index_type={self.index_type!r}")
        et = self.get_input_element_type(0)
        if not et.is_real():
            raise TypeError(f"TopKSoftmax: logits must be floating point, got {et}")
        shape = self.get_input_partial_shape(0)
        if shape.rank.is_dynamic:
            out = ov.PartialShape.dynamic()
        else:
            dims = list(shape)
            if not dims:
                raise ValueError("TopKSoftmax: logits must have rank >= 1")
            if dims[-1].is_static and dims[-1].get_length() < self.k:
                raise ValueError(f"TopKSoftmax: k={self.k} > E={dims[-1].get_length()}")
            out = ov.PartialShape(dims[:-1] + [ov.Dimension(self.k)])
        self.set_output_type(0, et, out)
        self.set_output_type(1, INDEX_TYPES[self.index_type], out)
        ### END SOLUTION

    def clone_with_new_inputs(self, new_inputs) -> "TopKSoftmax":
        ### BEGIN SOLUTION
        return TopKSoftmax(new_inputs, k=self.k, renormalize=self.renormalize, index_type=self.index_type)
        ### END SOLUTION

    def visit_attributes(self, visitor) -> bool:
        ### HINT: visitor.on_attributes(d) takes a dict of name -> int/bool/str; after the call d holds what was read back
        ### BEGIN SOLUTION
        attrs = {"k": self.k, "renormalize": self.renormalize, "index_type": self.index_type}
        visitor.on_attributes(attrs)
        self.k, self.renormalize, self.index_type = attrs["k"], attrs["renormalize"], attrs["index_type"]
        ### END SOLUTION
        return True

    def has_evaluate(self) -> bool:
        return True

    def evaluate(self, outputs, inputs) -> bool:
        ### HINT: inputs[0].data is a numpy view; set outputs[i].shape before writing outputs[i].data[:]
        ### BEGIN SOLUTION
        x = inputs[0].data.astype(np.float64)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        idx = np.argsort(-p, axis=-1, kind="stable")[..., : self.k]
        w = np.take_along_axis(p, idx, axis=-1)
        if self.renormalize:
            w = w / w.sum(axis=-1, keepdims=True)
        outputs[0].shape = w.shape
        outputs[1].shape = idx.shape
        outputs[0].data[:] = w
        outputs[1].data[:] = idx
        ### END SOLUTION
        return True
