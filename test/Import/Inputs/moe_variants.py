"""Variants of an eager mixture-of-experts export the importer must refuse
(moe-experts.test): tanh.onnx (the experts' SiLU sigmoid made a tanh),
leak.onnx (the routing one-hot also read by a graph output), and
onehot.onnx (a one-hot that is no router's)."""
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

# A one-hot that is not a router's (of an input, not of TopK's picks): left
# to the importer, which refuses OneHot itself.
x = helper.make_tensor_value_info("x", TensorProto.INT64, [4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])
depth = helper.make_tensor("depth", TensorProto.INT64, [], [3])
values = helper.make_tensor("values", TensorProto.FLOAT, [2], [0.0, 1.0])
g = helper.make_graph([helper.make_node("OneHot", ["x", "depth", "values"],
                                        ["y"], name="labels_one_hot")],
                      "onehot", [x], [y], [depth, values])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
          f"{out}/onehot.onnx")
