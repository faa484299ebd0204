"""Small models for the rules of lamina::rt::restoreParameters
(hf-training-reference.test). Writes OUT/tied.onnx and OUT/untied.onnx:

  ids -> Gather(emb) -> x
  x * g -> MatMul(w) -> * g -> MatMul(w2) -> h; x -> MatMul(w2) -> + h
  -> MatMul(head) -> logits

g is ones read by two nodes without module scopes (a merge: split), w2 is
random and read twice (a real tie: kept), head is emb's transpose bit for
bit in tied.onnx (tied back) and one element off in untied.onnx (kept).
OUT/zeros.onnx has emb and head all zeros (as a structure-only file's
weights read: no evidence of a tie, kept apart), OUT/zeros_tied.onnx a
zero emb the head reads through a Transpose (a tie: not split).
OUT/bias.onnx has a Gemm without C whose FX metadata (as the dynamo
exporter writes it) calls addmm with a bias (put back, zero), a MatMul
whose linear's bias is its Add (kept), and an embedding with padding_idx 0
(its row not trained by lookups). OUT/buffer.onnx is tied.onnx plus a
zero bias [1, 16] added to the logits that the dynamo exporter's metadata
marks as a PyTorch buffer (BART's final_logits_bias: not trained);
OUT/buffer_named.onnx the same without the metadata, the bias named
inner.final_logits_bias (known by its name, as inv_freq is).
OUT/conv_bias.onnx is a Conv without its bias whose FX metadata calls
conv2d with one (ViT's patch embedding after the dynamo exporter's
RemoveOptionalBiasFromConv: put back, zero, one per output channel) and
one whose call has bias None (kept without), averaged into `loss`.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def lm(nodes, inits, vocab: int) -> onnx.ModelProto:
    """ids [2, 6] -> logits [2, 6, vocab]."""
    graph = helper.make_graph(
        nodes, "restore", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 6, vocab])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def build(head_exact: bool, zeros: bool = False,
          read_table: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    v, d = 16, 8
    emb = rng.standard_normal((v, d)).astype(np.float32)
    head = emb.T.copy()
    if not head_exact:
        head[0, 0] += 1e-3
    if zeros:  # a structure-only file's weights, as they read
        emb, head = np.zeros_like(emb), np.zeros_like(head)
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("emb", emb), ("g", np.ones(d, np.float32)),
        ("w", rng.standard_normal((d, d)).astype(np.float32)),
        ("w2", rng.standard_normal((d, d)).astype(np.float32)),
        ("head", head))]
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["x"], name="embed"),
        helper.make_node("Mul", ["x", "g"], ["a"], name="norm1"),
        helper.make_node("MatMul", ["a", "w"], ["b"], name="proj"),
        helper.make_node("Mul", ["b", "g"], ["c"], name="norm2"),
        helper.make_node("MatMul", ["c", "w2"], ["e"], name="shared1"),
        helper.make_node("MatMul", ["x", "w2"], ["f"], name="shared2"),
        helper.make_node("Add", ["e", "f"], ["h"], name="sum"),
        helper.make_node("MatMul", ["h", "head"], ["logits"], name="lm_head"),
    ]
    if read_table:  # the head reads the table itself, through a Transpose
        inits = [t for t in inits if t.name != "head"]
        nodes[-1:] = [
            helper.make_node("Transpose", ["emb"], ["embT"], name="tie", perm=[1, 0]),
            helper.make_node("MatMul", ["h", "embT"], ["logits"], name="lm_head")]
    return lm(nodes, inits, v)


def fx(node, call, args, scopes):
    for key, value in (("pkg.torch.onnx.fx_node",
                        f"%{call} : [num_users=1] = call_function[target="
                        f"torch.ops.aten.{call}.default](args = ({args}), kwargs = {{}})"),
                       ("pkg.torch.onnx.name_scopes", repr(scopes))):
        entry = node.metadata_props.add()
        entry.key, entry.value = key, value
    return node


def build_bias() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    v, d = 16, 8
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("emb", rng.standard_normal((v, d)).astype(np.float32)),
        ("p.weight", rng.standard_normal((d, d)).astype(np.float32)),
        ("q.weight", rng.standard_normal((d, d)).astype(np.float32)),
        ("q.bias", rng.standard_normal(d).astype(np.float32)),
        ("head", rng.standard_normal((d, v)).astype(np.float32)),
        ("flat", np.array([12, d], np.int64)),
        ("back", np.array([2, 6, d], np.int64)))]
    nodes = [
        fx(helper.make_node("Gather", ["emb", "ids"], ["x"], name="embed"),
           "embedding", "%p_emb, %ids, 0", ["", "emb", "embedding"]),
        helper.make_node("Reshape", ["x", "flat"], ["x2"], name="flatten"),
        fx(helper.make_node("Gemm", ["x2", "p.weight"], ["y2"], name="node_Gemm"),
           "addmm", "%p_p_bias, %view, %p_p_weight", ["", "p", "addmm"]),
        fx(helper.make_node("MatMul", ["y2", "q.weight"], ["z0"], name="node_linear"),
           "linear", "%y2, %p_q_weight, %p_q_bias", ["", "q", "linear"]),
        fx(helper.make_node("Add", ["z0", "q.bias"], ["z2"], name="node_add"),
           "linear", "%y2, %p_q_weight, %p_q_bias", ["", "q", "linear"]),
        helper.make_node("Reshape", ["z2", "back"], ["z"], name="unflatten"),
        helper.make_node("MatMul", ["z", "head"], ["logits"], name="lm_head"),
    ]
    return lm(nodes, inits, v)


def build_buffer() -> onnx.ModelProto:
    m = build(True)
    g = m.graph
    g.initializer.append(numpy_helper.from_array(
        np.zeros((1, 16), np.float32), "final_logits_bias"))
    g.node[-1].output[0] = "lm"
    g.node.append(helper.make_node("Add", ["lm", "final_logits_bias"],
                                   ["logits"], name="bias"))
    for name, kind in (("final_logits_bias", "BUFFER"), ("w", "PARAMETER")):
        v = g.value_info.add()
        v.CopyFrom(helper.make_tensor_value_info(
            name, TensorProto.FLOAT, [1, 16] if kind == "BUFFER" else [8, 8]))
        entry = v.metadata_props.add()
        entry.key = "pkg.torch.export.graph_signature.InputSpec.kind"
        entry.value = kind
    return m


def build_conv_bias() -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("patch.weight", rng.standard_normal((4, 3, 2, 2)).astype(np.float32)),
        ("plain.weight", rng.standard_normal((4, 4, 1, 1)).astype(np.float32)))]
    nodes = [
        fx(helper.make_node("Conv", ["x", "patch.weight"], ["y"], name="node_conv",
                            strides=[2, 2]),
           "conv2d", "%x, %p_patch_weight, %p_patch_bias, [2, 2]",
           ["", "patch", "conv2d"]),
        fx(helper.make_node("Conv", ["y", "plain.weight"], ["z"], name="node_conv_1"),
           "conv2d", "%conv2d, %p_plain_weight, None", ["", "plain", "conv2d"]),
        helper.make_node("ReduceMean", ["z"], ["loss"], name="mean", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    onnx.save(build(True), os.path.join(out, "tied.onnx"))
    onnx.save(build(False), os.path.join(out, "untied.onnx"))
    onnx.save(build_bias(), os.path.join(out, "bias.onnx"))
    onnx.save(build_buffer(), os.path.join(out, "buffer.onnx"))
    named = build_buffer()  # a TorchScript export: the name alone
    del named.graph.value_info[:]
    for t in named.graph.initializer:
        if t.name == "final_logits_bias":
            t.name = "inner.final_logits_bias"
    named.graph.node[-1].input[1] = "inner.final_logits_bias"
    onnx.save(named, os.path.join(out, "buffer_named.onnx"))
    onnx.save(build_conv_bias(), os.path.join(out, "conv_bias.onnx"))
    onnx.save(build(True, zeros=True), os.path.join(out, "zeros.onnx"))
    onnx.save(build(True, zeros=True, read_table=True),
              os.path.join(out, "zeros_tied.onnx"))


if __name__ == "__main__":
    main()
