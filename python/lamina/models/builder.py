"""A tiny ONNX graph builder shared by the model definitions.

It tracks nodes, initializers and names, names nodes the way PyTorch's
TorchScript exporter does (``/transformer/h.0/attn/MatMul_1`` with output
``/transformer/h.0/attn/MatMul_1_output_0``), and hides the spellings that
changed between opsets (axes as attribute vs. input, fused norm/GELU ops).
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# torch.finfo(torch.float32).min: what HF models use for masked scores.
FLOAT_MIN = float(np.finfo(np.float32).min)


class GraphBuilder:
    """Accumulates one ONNX graph.

    ``dynamic``: batch/sequence sizes are read from the graph at run time
    (Shape/Gather) instead of being baked in as constants.
    ``materialize``: when False, parameters are declared (name, dims, type)
    but no array is ever allocated; ``storage.save`` later points them at
    a sparse external file.
    """

    def __init__(self, opset: int, *, seed: int = 0, dynamic: bool = False,
                 materialize: bool = True):
        if not 11 <= opset <= 28:
            raise ValueError(f"opset {opset} not supported (11..28)")
        self.opset = opset
        self.dynamic = dynamic
        # What a boolean attention mask writes over masked scores.
        self.mask_fill = float(np.finfo(np.float32).min)
        self.materialize = materialize
        self._rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._scope: list[str] = []
        self._counts: dict[str, int] = {}
        self._params: set[str] = set()

    # ----------------------------------------------------------- naming
    @contextlib.contextmanager
    def scope(self, *parts: str):
        """Nest node names, e.g. scope("transformer", "h.0", "attn")."""
        self._scope.extend(parts)
        try:
            yield
        finally:
            del self._scope[len(self._scope) - len(parts):]

    def _node_name(self, op_type: str) -> str:
        base = "/" + "/".join(self._scope + [op_type])
        n = self._counts.get(base, 0)
        self._counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    # ------------------------------------------------------------ nodes
    def op(self, op_type: str, *inputs, n_out: int = 1, outputs=None,
           domain: str = "", **attrs):
        """Append a node; returns its output name (or list if n_out > 1)."""
        name = self._node_name(op_type)
        if outputs is None:
            outputs = [f"{name}_output_{i}" for i in range(n_out)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        node = helper.make_node(op_type, ["" if i is None else i for i in inputs],
                                list(outputs), name=name, domain=domain, **attrs)
        self.nodes.append(node)
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def const(self, value, dtype=np.float32) -> str:
        """A Constant node, as TorchScript emits for Python literals."""
        arr = np.asarray(value, dtype=dtype)
        return self.op("Constant", value=numpy_helper.from_array(arr, ""))

    def i64(self, value) -> str:
        return self.const(value, np.int64)

    # ------------------------------------------------- graph interface
    def input(self, name: str, elem_type: int, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def output(self, value: str, name: str, elem_type: int, shape) -> str:
        """Mark ``value`` as graph output ``name`` by renaming its producer."""
        for node in self.nodes:
            for i, out in enumerate(node.output):
                if out == value:
                    node.output[i] = name
        for node in self.nodes:
            for i, inp in enumerate(node.input):
                if inp == value:
                    node.input[i] = name
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def param(self, name: str, shape, init: str = "normal") -> str:
        """A float32 initializer named like a PyTorch state_dict entry.

        Weights are N(0, 1) * 0.02; norm scales ("ones") are 1 + that, so
        outputs are not trivially zero. Nothing is allocated when
        ``materialize`` is False.
        """
        if name in self._params:
            raise ValueError(f"duplicate parameter {name}")
        self._params.add(name)
        shape = [int(d) for d in shape]
        if self.materialize:
            arr = self._rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            if init == "ones":
                arr += np.float32(1.0)
            tensor = numpy_helper.from_array(arr, name)
        else:
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
            # Marked external without location: storage.save fills it in.
            tensor.data_location = TensorProto.EXTERNAL
        self.initializers.append(tensor)
        return name

    # --------------------------------------- opset-dependent spellings
    def _axes_op(self, op_type: str, x: str, axes, since: int, **attrs) -> str:
        """Ops whose axes moved from attribute to input at opset ``since``."""
        if self.opset >= since:
            return self.op(op_type, x, self.i64(list(axes)), **attrs)
        return self.op(op_type, x, axes=list(axes), **attrs)

    def reduce_mean(self, x: str, axes, keepdims: int = 1) -> str:
        return self._axes_op("ReduceMean", x, axes, 18, keepdims=keepdims)

    def reduce_sum(self, x: str, axes, keepdims: int = 1) -> str:
        return self._axes_op("ReduceSum", x, axes, 13, keepdims=keepdims)

    def unsqueeze(self, x: str, axes) -> str:
        return self._axes_op("Unsqueeze", x, axes, 13)

    def squeeze(self, x: str, axes) -> str:
        return self._axes_op("Squeeze", x, axes, 13)

    def split(self, x: str, sizes, axis: int) -> list[str]:
        if self.opset >= 13:
            return self.op("Split", x, self.i64(list(sizes)), axis=axis,
                           n_out=len(sizes))
        return self.op("Split", x, axis=axis, split=list(sizes), n_out=len(sizes))

    def layer_norm(self, x: str, weight: str, bias: str, eps: float) -> str:
        if self.opset >= 17:
            return self.op("LayerNormalization", x, weight, bias, axis=-1,
                           epsilon=eps)
        # What TorchScript writes for F.layer_norm before opset 17.
        mean = self.reduce_mean(x, [-1])
        diff = self.op("Sub", x, mean)
        sq = self.op("Pow", diff, self.const(2.0))
        var = self.reduce_mean(sq, [-1])
        std = self.op("Sqrt", self.op("Add", var, self.const(eps)))
        norm = self.op("Div", diff, std)
        return self.op("Add", self.op("Mul", norm, weight), bias)

    def rms_norm(self, x: str, weight: str, eps: float) -> str:
        if self.opset >= 23:
            return self.op("RMSNormalization", x, weight, axis=-1, epsilon=eps)
        # LlamaRMSNormalization as torch.export lowers it (rsqrt -> Sqrt+Reciprocal).
        var = self.reduce_mean(self.op("Pow", x, self.const(2.0)), [-1])
        inv = self.op("Reciprocal",
                      self.op("Sqrt", self.op("Add", var, self.const(eps))))
        return self.op("Mul", weight, self.op("Mul", x, inv))

    def gelu_tanh(self, x: str) -> str:
        if self.opset >= 20:
            return self.op("Gelu", x, approximate="tanh")
        # HF NewGELUActivation, literal by literal.
        half_x = self.op("Mul", x, self.const(0.5))
        cube = self.op("Pow", x, self.const(3.0))
        inner = self.op("Add", x, self.op("Mul", cube, self.const(0.044715)))
        scaled = self.op("Mul", inner, self.const(math.sqrt(2.0 / math.pi)))
        one_plus = self.op("Add", self.op("Tanh", scaled), self.const(1.0))
        return self.op("Mul", half_x, one_plus)

    def gelu_erf(self, x: str) -> str:
        # TorchScript's export of exact F.gelu.
        erf = self.op("Erf", self.op("Div", x, self.const(1.4142135381698608)))
        plus = self.op("Add", erf, self.const(1.0))
        return self.op("Mul", self.op("Mul", x, plus), self.const(0.5))

    # ------------------------------------------------- shape arithmetic
    def dim(self, x: str, axis: int) -> str:
        """Scalar int64 size of ``x`` along ``axis`` (Shape + Gather)."""
        return self.op("Gather", self.op("Shape", x), self.i64(axis), axis=0)

    def batch_seq(self, x: str, batch: int, seq: int):
        """(B, S) as ints when static, as scalar tensors read from x when dynamic."""
        if not self.dynamic:
            return batch, seq
        return self.dim(x, 0), self.dim(x, 1)

    def shape(self, dims) -> str:
        """1-D int64 shape from ints and scalar tensors, as TorchScript
        lowers ``x.view(b, s, n, d)``: Unsqueeze each scalar, Concat."""
        if all(isinstance(d, int) for d in dims):
            return self.i64(list(dims))
        parts = [self.i64([d]) if isinstance(d, int) else self.unsqueeze(d, [0])
                 for d in dims]
        return self.op("Concat", *parts, axis=0)

    def reshape(self, x: str, dims) -> str:
        return self.op("Reshape", x, self.shape(dims))

    def scalar(self, d) -> str:
        """A scalar int64 tensor for an int or pass a tensor through."""
        return self.i64(d) if isinstance(d, int) else d

    def positions(self, seq) -> str:
        """position_ids [1, S] int64: Range when dynamic, a constant otherwise."""
        if isinstance(seq, int):
            return self.i64(np.arange(seq, dtype=np.int64)[None, :])
        rng = self.op("Range", self.i64(0), seq, self.i64(1))
        return self.unsqueeze(rng, [0])

    def causal_mask(self, seq) -> str:
        """Bool [S, S], True above the diagonal (future positions).

        Opset >= 14: Trilu on a ConstantOfShape of ones; before that
        Greater on two Range vectors (Trilu does not exist yet)."""
        if self.opset >= 14:
            ones = self.op("ConstantOfShape", self.shape([seq, seq]),
                           value=numpy_helper.from_array(np.ones([1], np.float32), ""))
            upper = self.op("Trilu", ones, self.i64(1), upper=1)
            return self.op("Cast", upper, to=TensorProto.BOOL)
        rng = self.op("Range", self.i64(0), self.scalar(seq), self.i64(1))
        rows = self.unsqueeze(rng, [1])
        cols = self.unsqueeze(rng, [0])
        return self.op("Greater", cols, rows)

    # ------------------------------------------------------------ model
    def make_model(self, *, ir_version: int | None = None,
                   graph_name: str = "main_graph", doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, graph_name, self.inputs,
                                  self.outputs, self.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets,
                                  producer_name="lamina.models",
                                  producer_version="0.1.0", doc_string=doc)
        model.ir_version = ir_version or default_ir_version(self.opset)
        return model


def default_ir_version(opset: int) -> int:
    """The IR version an exporter pairs with ``opset`` (the minimum allowed)."""
    return helper.find_min_ir_version_for([helper.make_opsetid("", opset)])


def is_topological(graph: onnx.GraphProto) -> bool:
    """True if every node input is produced before it (or is a graph
    input/initializer). Subgraph outer-scope reads are not followed."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    known.add("")
    for node in graph.node:
        if any(i not in known for i in node.input):
            return False
        known.update(node.output)
    return True


def shuffle_nodes(model: onnx.ModelProto, seed: int) -> None:
    """Reorder graph.node randomly and non-topologically, in place."""
    nodes = list(model.graph.node)
    rng = np.random.default_rng(seed)
    for _ in range(100):
        order = rng.permutation(len(nodes))
        del model.graph.node[:]
        model.graph.node.extend(nodes[i] for i in order)
        if not is_topological(model.graph):
            return
    raise RuntimeError("could not produce a non-topological order")
