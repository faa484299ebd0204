"""Variants of a dynamo mixture-of-experts export (batched_mm experts) the
importer must refuse (moe-experts.test): dynamo-tanh.onnx (the experts' SiLU
sigmoid made a tanh) and dynamo-sum0.onnx (the experts' outputs summed over the
wrong axis)."""
import sys

import onnx
from onnx import helper

src, out = sys.argv[1], sys.argv[2]

m = onnx.load(src)
for n in m.graph.node:
    if n.op_type == "Sigmoid" and "experts" in str(n.metadata_props):
        n.op_type = "Tanh"
        break
onnx.save(m, f"{out}/dynamo-tanh.onnx")

m = onnx.load(src)
sink = next(n for n in m.graph.node if n.op_type == "ReduceSum"
            and "experts" in str(n.metadata_props))
m.graph.initializer.append(helper.make_tensor("axis0", onnx.TensorProto.INT64,
                                              [1], [0]))
sink.input[1] = "axis0"
onnx.save(m, f"{out}/dynamo-sum0.onnx")
