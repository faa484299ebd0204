"""Variants of an eager mixture-of-experts export the importer must refuse
(moe-experts.test): tanh.onnx (the experts' SiLU sigmoid made a tanh) and
leak.onnx (the routing one-hot also read by a graph output)."""
import sys

import onnx
from onnx import TensorProto, helper

src, out = sys.argv[1], sys.argv[2]

m = onnx.load(src)
for n in m.graph.node:
    if n.op_type == "Sigmoid" and "experts" in n.name:
        n.op_type = "Tanh"
        break
onnx.save(m, f"{out}/tanh.onnx")

m = onnx.load(src)
one_hot = next(n for n in m.graph.node if n.op_type == "OneHot")
m.graph.node.append(helper.make_node("ReduceMax", [one_hot.output[0]],
                                     ["leaked"], name="leak", keepdims=0))
m.graph.output.append(helper.make_tensor_value_info("leaked", TensorProto.INT64, None))
onnx.save(m, f"{out}/leak.onnx")
