"""Tiny one-op ONNX models for lamina-import-fuzzer's seed corpus.

    python3 fuzz/make_op_seeds.py OUTDIR

One model per op the importer registers (lib/Target/ONNX/Ops*.cpp), in two
forms: `op-<Op>.onnx` reads its tensor operands from graph inputs, and
`opc-<Op>.onnx` feeds every operand from a Constant node, so the graph
dialect's folders (lib/Dialect/Graph/IR/GraphFolds.cpp) run on it. The
generated transformer models use only a third of the ops, and byte-level
mutation can't rename an op (the name is a length-prefixed string), so
without these the rest is never reached. Models are small (< 2 KB) and are
not checked: a few are deliberately odd (a zero divisor, negative indices).
"""

from __future__ import annotations

import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = np.float32


def f(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F)


def i64(*v):
    return np.array(v, np.int64)


# (name, op, operands, attrs, outputs, opset). An operand is an np.ndarray,
# "-" for an empty (omitted) optional input. Integer and bool operands are
# always constants (shape-like inputs must be known at import time).
CASES = [
    *[(op, op, [f(2, 3)], {}, 1, 18) for op in
      ("Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Erf",
       "Sigmoid", "Relu", "Cos", "Sin", "Identity")],
    ("Not", "Not", [np.array([True, False])], {}, 1, 18),
    ("Gelu", "Gelu", [f(2, 3)], {"approximate": "tanh"}, 1, 20),
    *[(op, op, [f(2, 3), f(3, seed=1)], {}, 1, 18) for op in
      ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Greater", "GreaterOrEqual",
       "Less", "LessOrEqual")],
    ("DivInt", "Div", [i64(7, -7, 5), i64(2, 2, 0)], {}, 1, 18),
    ("PowInt", "Pow", [i64(2, 3, -2), i64(3, 40, 2)], {}, 1, 18),
    ("And", "And", [np.array([True, False]), np.array([True, True])], {}, 1, 18),
    ("Or", "Or", [np.array([True, False]), np.array([False, False])], {}, 1, 18),
    *[(op, op, [f(2, 3), f(3, seed=1), f(1, 3, seed=2)], {}, 1, 18)
      for op in ("Sum", "Min", "Max")],
    ("Where", "Where", [np.array([True, False, True]), f(2, 3), f(3)], {}, 1, 18),
    ("Cast", "Cast", [f(2, 3)], {"to": TensorProto.INT64}, 1, 18),
    ("CastF16", "Cast", [i64(1, 70000, -3)], {"to": TensorProto.FLOAT16}, 1, 18),
    ("CastLike", "CastLike", [f(2, 3), i64(1)], {}, 1, 18),
    ("Dropout", "Dropout", [f(2, 3), np.array(0.5, F), np.array(False)], {}, 2, 18),
    ("MatMul", "MatMul", [f(2, 3, 4), f(4, 5)], {}, 1, 18),
    ("MatMul1D", "MatMul", [f(4), f(4)], {}, 1, 18),
    ("Gemm", "Gemm", [f(4, 3), f(5, 4), f(5)],
     {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, 1, 18),
    ("Softmax", "Softmax", [f(2, 3, 4)], {"axis": -1}, 1, 18),
    ("Softmax11", "Softmax", [f(2, 3, 4)], {"axis": 1}, 1, 11),
    ("LogSoftmax", "LogSoftmax", [f(2, 3, 4)], {"axis": 1}, 1, 18),
    ("LayerNormalization", "LayerNormalization", [f(2, 3, 4), f(4), f(4)],
     {"axis": -1, "epsilon": 1e-5}, 1, 18),
    ("RMSNormalization", "RMSNormalization", [f(2, 3, 4), f(4)],
     {"axis": -1, "epsilon": 1e-6}, 1, 23),
    ("ReduceSum", "ReduceSum", [f(2, 3, 4), i64(0, -1)], {"keepdims": 1}, 1, 13),
    ("ReduceSum11", "ReduceSum", [f(2, 3, 4)], {"axes": [1], "keepdims": 0}, 1, 11),
    ("ReduceMean", "ReduceMean", [f(2, 3, 4), i64(1)], {"keepdims": 0}, 1, 18),
    ("ReduceMax", "ReduceMax", [f(2, 3, 4), "-"],
     {"keepdims": 1, "noop_with_empty_axes": 0}, 1, 18),
    ("ReduceProd", "ReduceProd", [i64(1, 2, 3, 4), i64(0)], {"keepdims": 0}, 1, 18),
    ("CumSum", "CumSum", [f(2, 3), i64(1)], {"exclusive": 1, "reverse": 1}, 1, 18),
    ("Reshape", "Reshape", [f(2, 3, 4), i64(0, -1)], {}, 1, 18),
    ("ReshapeZero", "Reshape", [f(2, 0, 4), i64(0, 4)], {"allowzero": 1}, 1, 18),
    ("Flatten", "Flatten", [f(2, 3, 4)], {"axis": -1}, 1, 18),
    ("Squeeze", "Squeeze", [f(2, 1, 4), i64(1)], {}, 1, 18),
    ("Squeeze11", "Squeeze", [f(2, 1, 4)], {"axes": [-2]}, 1, 11),
    ("Unsqueeze", "Unsqueeze", [f(2, 4), i64(0, -1)], {}, 1, 18),
    ("Unsqueeze11", "Unsqueeze", [f(2, 4)], {"axes": [1]}, 1, 11),
    ("Transpose", "Transpose", [f(2, 3, 4)], {"perm": [2, 0, 1]}, 1, 18),
    ("Concat", "Concat", [f(2, 3), f(2, 1, seed=1), f(2, 2, seed=2)], {"axis": -1}, 1, 18),
    ("Split", "Split", [f(2, 6), i64(2, 4)], {"axis": 1}, 2, 18),
    ("SplitNum", "Split", [f(2, 7)], {"axis": -1, "num_outputs": 3}, 3, 18),
    ("Split11", "Split", [f(6, 2)], {"axis": 0, "split": [1, 5]}, 2, 11),
    ("Slice", "Slice", [f(4, 6), i64(1, -1), i64(3, -6), i64(0, 1), i64(1, -2)], {}, 1, 18),
    ("SliceBig", "Slice", [f(4, 6), i64(0), i64(2**62), i64(-1), i64(2)], {}, 1, 18),
    ("Expand", "Expand", [f(3, 1), i64(2, 1, 4)], {}, 1, 18),
    ("Tile", "Tile", [f(2, 3), i64(2, 1)], {}, 1, 18),
    ("Trilu", "Trilu", [f(3, 4), i64(-1)], {"upper": 0}, 1, 18),
    ("Gather", "Gather", [f(5, 3), i64(0, -1, 4)], {"axis": 0}, 1, 18),
    ("GatherScalar", "Gather", [i64(3, 4, 5), np.array(-1, np.int64)], {}, 1, 18),
    ("GatherND", "GatherND", [f(2, 3, 4), np.array([[1], [0]], np.int64)],
     {"batch_dims": 1}, 1, 18),
    ("ScatterND", "ScatterND", [f(4, 3), np.array([[1], [3]], np.int64), f(2, 3, seed=1)],
     {"reduction": "add"}, 1, 18),
    ("Shape", "Shape", [f(2, 3, 4)], {"start": 1, "end": -1}, 1, 18),
    ("Size", "Size", [f(2, 3, 4)], {}, 1, 18),
    ("ConstantOfShape", "ConstantOfShape", [i64(2, 3)],
     {"value": numpy_helper.from_array(np.array([7], np.int64))}, 1, 18),
    ("Range", "Range", [np.array(1, np.int64), np.array(10, np.int64),
                        np.array(3, np.int64)], {}, 1, 18),
    ("RangeF", "Range", [np.array(0.5, F), np.array(-2, F), np.array(-0.75, F)], {}, 1, 18),
]


def _const(name, value):
    return helper.make_node("Constant", [], [name], name=name + "_const",
                            value=numpy_helper.from_array(value, name))


def build(op, operands, attrs, n_out, opset, all_constant):
    nodes, inputs, names = [], [], []
    for i, v in enumerate(operands):
        if isinstance(v, str):
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if all_constant or v.dtype != F:
            nodes.append(_const(name, v))
        else:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                        list(v.shape)))
    outs = [f"out{i}" for i in range(n_out)]
    nodes.append(helper.make_node(op, names, outs, name="node", **attrs))
    graph = helper.make_graph(
        nodes, "g", inputs,
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="fuzz/make_op_seeds.py")
    model.ir_version = 8 if opset <= 18 else 10
    return model


def extra_cases():
    """Graph-level shapes the single-op cases don't have."""
    out = {}
    # Constant in each attribute form.
    for attr, value in [("value_float", 1.5), ("value_floats", [1.0, 2.0]),
                        ("value_int", 3), ("value_ints", [1, 2, 3])]:
        g = helper.make_graph([helper.make_node("Constant", [], ["y"], **{attr: value})],
                              "g", [], [helper.make_tensor_value_info("y", 0, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        out[f"Constant-{attr}"] = m
    # SequenceConstruct -> ConcatFromSequence (new_axis).
    x = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "abc"]
    g = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1)],
        "g", x, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    out["ConcatFromSequence"] = m
    # If on a constant condition with outer-scope reads.
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    g = helper.make_graph(
        [_const("c", np.array(False)),
         helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    out["If"] = m
    # Symbolic dims through Shape -> Gather -> Concat -> Reshape.
    g = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         _const("i", np.array([0, 1], np.int64)),
         helper.make_node("Gather", ["s", "i"], ["bs"], axis=0),
         _const("m1", np.array([-1], np.int64)),
         helper.make_node("Concat", ["bs", "m1"], ["shape"], axis=0),
         helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    out["SymbolicReshape"] = m
    return out


def main(argv):
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    outdir = argv[0]
    os.makedirs(outdir, exist_ok=True)
    n = 0
    for name, op, operands, attrs, n_out, opset in CASES:
        for prefix, const in (("op", False), ("opc", True)):
            if not const and all(isinstance(v, str) or v.dtype != F for v in operands):
                continue  # no float operand: both forms would be the same
            model = build(op, operands, attrs, n_out, opset, const)
            with open(os.path.join(outdir, f"{prefix}-{name}.onnx"), "wb") as fh:
                fh.write(model.SerializeToString())
            n += 1
    for name, model in extra_cases().items():
        with open(os.path.join(outdir, f"graph-{name}.onnx"), "wb") as fh:
            fh.write(model.SerializeToString())
        n += 1
    print(f"make_op_seeds: {n} models in {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
