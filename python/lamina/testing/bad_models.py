"""Small invalid or unsupported ONNX models for the importer's error tests.

    python3 -m lamina.testing.bad_models OUTDIR

writes one file per case (see CASES and README.md in this folder). Models
are serialized directly, without onnx.save_model, so that deliberately
broken fields (external data paths, raw sizes, dims) reach the file as is.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64
SEED = 1234


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17, ir=None, extra_opsets=(),
           functions=(), check=True):
    graph = helper.make_graph(nodes, "main_graph", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v)
                                                 for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions),
                              producer_name="lamina.testing.bad_models")
    model.ir_version = ir or helper.find_min_ir_version_for(opsets[:1], True)
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def _write(path, model_or_bytes):
    data = (model_or_bytes if isinstance(model_or_bytes, bytes)
            else model_or_bytes.SerializeToString())
    with open(path, "wb") as f:
        f.write(data)


def _weights(shape, seed=SEED):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------ valid-but-odd
def unsupported_ops():
    """ConvTranspose/LSTM/NonMaxSuppression (unsupported) around Relu/Reshape
    (supported)."""
    w = numpy_helper.from_array(_weights([4, 3, 3, 3]), "conv.weight")
    shape = numpy_helper.from_array(np.array([6, 1, 24], np.int64), "lstm_in_shape")
    lw = numpy_helper.from_array(_weights([1, 32, 24]), "lstm.W")
    lr = numpy_helper.from_array(_weights([1, 32, 8]), "lstm.R")
    nodes = [
        helper.make_node("ConvTranspose", ["x", "conv.weight"], ["conv_out"], name="conv_node"),
        helper.make_node("Relu", ["conv_out"], ["relu_out"], name="relu_node"),
        helper.make_node("Reshape", ["relu_out", "lstm_in_shape"], ["seq_in"],
                         name="reshape_node"),
        helper.make_node("LSTM", ["seq_in", "lstm.W", "lstm.R"], ["lstm_y"],
                         name="lstm_node", hidden_size=8),
        helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["selected"],
                         name="nms_node"),
    ]
    return _model(nodes, [_vi("x", [1, 3, 8, 8]), _vi("boxes", [1, 10, 4]),
                          _vi("scores", [1, 1, 10])],
                  [_vi("lstm_y", [6, 1, 1, 8]), _vi("selected", [None, 3], I64)],
                  [w, shape, lw, lr])


def vendor_op():
    nodes = [
        helper.make_node("FusedMatMul", ["a", "b"], ["mm"], name="fused_mm",
                         domain="com.microsoft", alpha=1.0, transA=0, transB=0),
        helper.make_node("Relu", ["mm"], ["y"], name="relu"),
    ]
    return _model(nodes, [_vi("a", [2, 3]), _vi("b", [3, 4])], [_vi("y", [2, 4])],
                  extra_opsets=[("com.microsoft", 1)])


def unbound_dims():
    """x [batch, seq, 8], past [batch, 8, past] -> y [batch, seq, past]."""
    w = numpy_helper.from_array(_weights([8, 8]), "proj.weight")
    nodes = [
        helper.make_node("MatMul", ["x", "proj.weight"], ["h"], name="proj"),
        helper.make_node("Add", ["h", "x"], ["r"], name="residual"),
        helper.make_node("MatMul", ["r", "past"], ["y"], name="scores"),
    ]
    return _model(nodes, [_vi("x", ["batch", "seq", 8]), _vi("past", ["batch", 8, "past"])],
                  [_vi("y", ["batch", "seq", "past"])], [w])


# ------------------------------------------------------------ external data
def _ext_model(location, offset=0, length=64):
    """MatMul(x [2,4], w [4,4]) with w's data at location/offset/length."""
    w = TensorProto(name="w", data_type=F, dims=[4, 4])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        w.external_data.add(key=k, value=str(v))
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")
    return _model([node], [_vi("x", [2, 4])], [_vi("y", [2, 4])], [w], check=False)


def _blob(path, n=64):
    with open(path, "wb") as f:
        f.write(_weights([n // 4]).tobytes())


def write_external_cases(out):
    _write(os.path.join(out, "ext_absolute.onnx"), _ext_model("/etc/passwd"))
    # ../outside.bin is deliberately not created: rejecting must not need it.
    _write(os.path.join(out, "ext_dotdot.onnx"), _ext_model("../outside.bin"))
    link = os.path.join(out, "ext_symlink.bin")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink("/etc/hostname", link)
    _write(os.path.join(out, "ext_symlink.onnx"), _ext_model("ext_symlink.bin"))
    _blob(os.path.join(out, "ext_offset.bin"))
    _write(os.path.join(out, "ext_offset.onnx"), _ext_model("ext_offset.bin", 32, 64))
    _blob(os.path.join(out, "ext_length.bin"))
    _write(os.path.join(out, "ext_length.onnx"), _ext_model("ext_length.bin", 0, 32))
    _write(os.path.join(out, "ext_missing.onnx"), _ext_model("no_such_file.bin"))


# ------------------------------------------------------------ broken files
def _small_valid():
    nodes = [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["z"], name="relu")]
    return _model(nodes, [_vi("x", [2, 3]), _vi("y", [2, 3])], [_vi("z", [2, 3])])


def truncated():
    data = _small_valid().SerializeToString()
    return data[: len(data) // 2]


def garbage():
    return np.random.default_rng(SEED).integers(0, 256, 200, dtype=np.uint8).tobytes()


def cycle():
    """a: Add(x, b_out) -> a_out; b: Relu(a_out) -> b_out."""
    nodes = [helper.make_node("Add", ["x", "b_out"], ["a_out"], name="a"),
             helper.make_node("Relu", ["a_out"], ["b_out"], name="b")]
    return _model(nodes, [_vi("x", [2, 3])], [_vi("b_out", [2, 3])], check=False)


def _add_model(opset, ir):
    node = helper.make_node("Add", ["x", "y"], ["z"], name="add")
    return _model([node], [_vi("x", [2, 3]), _vi("y", [2, 3])], [_vi("z", [2, 3])],
                  opset=opset, ir=ir, check=False)


def out_of_order():
    """y = Sigmoid(x - Relu(x + x)) as n0 -> ... -> n4, listed n4 first."""
    ops = [("Add", ["x", "x"]), ("Relu", None), ("Neg", None), ("Add", "x"),
           ("Sigmoid", None)]
    nodes, prev = [], None
    for i, (op, ins) in enumerate(ops):
        if not isinstance(ins, list):
            ins = [prev] if ins is None else [prev, ins]
        out = "y" if i == len(ops) - 1 else f"t{i}"
        nodes.append(helper.make_node(op, ins, [out], name=f"n{i}"))
        prev = out
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    nodes.reverse()
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def duplicate_constants(second_is_constant=True):
    """PyTorch 1.6's repeated Constant names: c is defined as 1, read, then
    defined again as 2 and read again. onnxruntime's last definition wins
    for both readers: y = (x + 2) * 2. With `second_is_constant` false the
    second definition is an Identity, which stays an error."""
    def const(name, value):
        return helper.make_node(
            "Constant", [], ["c"], name=name,
            value=helper.make_tensor("v", TensorProto.FLOAT, [], [value]))
    second = const("c2", 2.0) if second_is_constant else helper.make_node(
        "Identity", ["x"], ["c"], name="c2")
    nodes = [const("c1", 1.0),
             helper.make_node("Add", ["x", "c"], ["t"], name="add"),
             second,
             helper.make_node("Mul", ["t", "c"], ["y"], name="mul")]
    return _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])], check=False)


# ------------------------------------------------- structured control flow
def nested_functions():
    """out = Outer(x, y; alpha=2.5) = Inner(x; alpha) + y = x * 2.5 + y."""
    fops = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    alpha_ref = helper.make_attribute_ref("value_float", F)
    alpha_ref.ref_attr_name = "alpha"
    const = helper.make_node("Constant", [], ["c"], name="inner_alpha")
    const.attribute.append(alpha_ref)
    inner = helper.make_function(
        "custom", "Inner", ["x"], ["y"],
        [const, helper.make_node("Mul", ["x", "c"], ["y"], name="inner_mul")],
        fops, attributes=["alpha"])
    call_inner = helper.make_node("Inner", ["x"], ["t"], name="call_inner",
                                  domain="custom")
    ref = helper.make_attribute_ref("alpha", F)
    ref.ref_attr_name = "alpha"
    call_inner.attribute.append(ref)
    outer = helper.make_function(
        "custom", "Outer", ["x", "y"], ["z"],
        [call_inner, helper.make_node("Add", ["t", "y"], ["z"], name="outer_add")],
        fops, attributes=["alpha"])
    call = helper.make_node("Outer", ["x", "y"], ["out"], name="call_outer",
                            domain="custom", alpha=2.5)
    return _model([call], [_vi("x", [2, 3]), _vi("y", [2, 3])], [_vi("out", [2, 3])],
                  extra_opsets=[("custom", 1)], functions=[inner, outer])


def if_const():
    """z = If(Constant true) then x + y else x - y; branches read outer x, y."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["then_out"], name="then_add")],
        "then_branch", [], [_vi("then_out", [2, 3])])
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["x", "y"], ["else_out"], name="else_sub")],
        "else_branch", [], [_vi("else_out", [2, 3])])
    nodes = [
        helper.make_node("Constant", [], ["cond"], name="cond_const",
                         value=numpy_helper.from_array(np.array(True), "")),
        helper.make_node("If", ["cond"], ["z"], name="if_node",
                         then_branch=then_g, else_branch=else_g),
    ]
    return _model(nodes, [_vi("x", [2, 3]), _vi("y", [2, 3])], [_vi("z", [2, 3])])


def sequence_concat():
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b", "c"], ["seq"], name="seq_construct"),
        helper.make_node("ConcatFromSequence", ["seq"], ["y"], name="concat_seq", axis=1),
    ]
    return _model(nodes, [_vi(n, [2, 3]) for n in "abc"], [_vi("y", [2, 9])])


# --------------------------------------------------- malformed tensors
def _matmul_w(w):
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")
    return _model([node], [_vi("x", [2, 4])], [_vi("y", [2, 4])], [w], check=False)


def bad_raw_size():
    return _matmul_w(TensorProto(name="w", data_type=F, dims=[4, 4], raw_data=bytes(12)))


def negative_dim():
    return _matmul_w(TensorProto(name="w", data_type=F, dims=[-1, 4], raw_data=bytes(16)))


CASES = {
    "unsupported_ops.onnx": unsupported_ops,
    "vendor_op.onnx": vendor_op,
    "unbound_dims.onnx": unbound_dims,
    "truncated.onnx": truncated,
    "garbage.onnx": garbage,
    "cycle.onnx": cycle,
    "opset_too_old.onnx": lambda: _add_model(7, 3),
    "opset_too_new.onnx": lambda: _add_model(30, onnx.IR_VERSION),
    "ir_current.onnx": lambda: _add_model(17, 14),
    "ir_too_new.onnx": lambda: _add_model(17, 15),
    "duplicate_constants.onnx": duplicate_constants,
    "duplicate_outputs.onnx": lambda: duplicate_constants(False),
    "out_of_order.onnx": out_of_order,
    "nested_functions.onnx": nested_functions,
    "if_const.onnx": if_const,
    "sequence_concat.onnx": sequence_concat,
    "bad_raw_size.onnx": bad_raw_size,
    "negative_dim.onnx": negative_dim,
}
EXTERNAL_CASES = ["ext_absolute.onnx", "ext_dotdot.onnx", "ext_symlink.onnx",
                  "ext_offset.onnx", "ext_length.onnx", "ext_missing.onnx"]


def write_all(out: str) -> list[str]:
    """Write every case into ``out``; returns the .onnx file names."""
    os.makedirs(out, exist_ok=True)
    for name, make in CASES.items():
        _write(os.path.join(out, name), make())
    write_external_cases(out)
    return sorted(list(CASES) + EXTERNAL_CASES)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python3 -m lamina.testing.bad_models OUTDIR", file=sys.stderr)
        return 2
    for name in write_all(argv[0]):
        print(os.path.join(argv[0], name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
