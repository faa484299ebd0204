"""SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss, GatherElements and
ScatterElements under lamina-eval, against onnxruntime (loss-ops.test).

  loss_ops.py LAMINA_EVAL WORKDIR [FILTER]

For every case (a one-node model, or two for NLL after LogSoftmax; FILTER a
substring of the case names) it checks:

* forward: lamina-eval's outputs equal onnxruntime's on the same f32 model
  (rtol 1e-5, atol 1e-6);
* gradients: the model's float initializers (scores, data, updates; not
  the losses' class weights, which stay constants) are what lamina trains; `lamina-eval --loss-output loss` gives the
  gradient of loss = sum(outputs * fixed random weights) (a scalar output
  is the loss itself), which must equal central finite differences of the
  same loss computed by onnxruntime in f64 (the initializers as inputs):
  within 1e-4 of the largest gradient element.

Prints one line per case and "N cases ok", or exits non-zero with the
first mismatch.
"""
import itertools
import os
import subprocess
import sys
import zlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE


class Case:
    def __init__(self, name, nodes, params, inputs, outputs, opset=13,
                 constants=("cw",)):
        self.name, self.nodes, self.opset = name, nodes, opset
        self.constants = constants  # float initializers lamina keeps constant
        self.params = params    # float initializers: trained by lamina
        self.inputs = inputs    # integer graph inputs
        self.outputs = outputs  # the op's outputs, compared forward


def model(case, dtype, params_as_inputs, loss_weights):
    """The case's graph in `dtype`, with a `loss` output when loss_weights
    (output name -> array, None for a scalar output) is given."""
    elem = F32 if dtype == np.float32 else F64
    nodes = list(case.nodes)
    inits, ins = [], []
    for name, value in case.params.items():
        value = value.astype(dtype)
        if params_as_inputs:
            ins.append(helper.make_tensor_value_info(name, elem, value.shape))
        else:
            inits.append(numpy_helper.from_array(value, name))
    for name, value in case.inputs.items():
        ins.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
    outs = [helper.make_tensor_value_info(o, elem, None) for o in case.outputs]
    if loss_weights is not None:
        terms = []
        for o, w in loss_weights.items():
            if w is None:
                terms.append(o)
                continue
            inits.append(numpy_helper.from_array(w.astype(dtype), "w_" + o))
            nodes.append(helper.make_node("Mul", [o, "w_" + o], ["m_" + o]))
            nodes.append(helper.make_node("ReduceSum", ["m_" + o], ["s_" + o],
                                          keepdims=0))
            terms.append("s_" + o)
        while len(terms) > 1:
            a, b = terms.pop(), terms.pop()
            nodes.append(helper.make_node("Add", [a, b], [a + "+" + b]))
            terms.append(a + "+" + b)
        nodes.append(helper.make_node("Identity", [terms[0]], ["loss"]))
        outs.append(helper.make_tensor_value_info("loss", elem, []))
    g = helper.make_graph(nodes, case.name, ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", case.opset)])
    m.ir_version = 8
    return m


def run_eval(lamina_eval, path, case, indir, outdir, loss):
    cmd = [lamina_eval, path, "--output-dir", outdir]
    for name in case.inputs:
        cmd += ["--input", f"{name}={indir}/{name}.npy"]
    if loss:
        cmd += ["--loss-output", "loss"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{case.name}: lamina-eval failed:\n{r.stderr}")


def check_case(case, lamina_eval, work):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    d = os.path.join(work, case.name)
    os.makedirs(d + ".in", exist_ok=True)
    for name, value in case.inputs.items():
        np.save(f"{d}.in/{name}.npy", value)

    # Forward against onnxruntime (f32).
    fwd = model(case, np.float32, False, None)
    onnx.save(fwd, d + ".onnx")
    run_eval(lamina_eval, d + ".onnx", case, d + ".in", d + ".fwd", loss=False)
    sess = ort.InferenceSession(fwd.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    want = dict(zip(case.outputs, sess.run(case.outputs, case.inputs)))
    fwd_err = 0.0
    for o in case.outputs:
        got = np.load(f"{d}.fwd/{o}.npy")
        if got.shape != want[o].shape:
            sys.exit(f"{case.name}: {o} shape {got.shape}, onnxruntime "
                     f"{want[o].shape}")
        if not np.allclose(got, want[o], rtol=1e-5, atol=1e-6, equal_nan=True):
            sys.exit(f"{case.name}: {o} differs from onnxruntime:\n"
                     f"lamina {got}\nonnxruntime {want[o]}")
        fin = np.isfinite(want[o])
        if fin.any():
            fwd_err = max(fwd_err, float(np.max(np.abs(got[fin] - want[o][fin]))))

    # Gradients against finite differences of onnxruntime in f64.
    weights = {o: (None if want[o].ndim == 0
                   else rng.standard_normal(want[o].shape))
               for o in case.outputs}
    train = model(case, np.float32, False, weights)
    onnx.save(train, d + ".train.onnx")
    run_eval(lamina_eval, d + ".train.onnx", case, d + ".in", d + ".grad",
             loss=True)
    f64 = model(case, np.float64, True, weights)
    try:
        ref = ort.InferenceSession(f64.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    except Exception:
        # onnxruntime has no f64 kernel for some ops (Conv, the pools):
        # ONNX's own reference evaluator computes them in f64.
        from onnx.reference import ReferenceEvaluator
        ref = ReferenceEvaluator(f64)
    params = {k: v.astype(np.float64) for k, v in case.params.items()}

    def loss_at(p):
        return float(ref.run(["loss"], {**p, **case.inputs})[0])

    grad_err = 0.0
    for name, value in params.items():
        grad_file = f"{d}.grad/grad%3A{name}.npy"
        if value.size <= 1 or name in case.constants:
            # A scalar initializer, the losses' class weights and batch
            # norm's statistics are constants: not trained, as PyTorch
            # does not train them.
            if os.path.exists(grad_file):
                sys.exit(f"{case.name}: {name} was trained")
            continue
        got = np.load(grad_file).astype(np.float64)
        fd = np.zeros_like(value)
        h = 1e-5
        for i in np.ndindex(value.shape):
            for sign in (1, -1):
                p = dict(params)
                p[name] = value.copy()
                p[name][i] += sign * h
                fd[i] += sign * loss_at(p) / (2 * h)
        scale = max(float(np.max(np.abs(fd))), 1e-2)
        err = float(np.max(np.abs(got - fd))) / scale
        if err > 1e-4:
            sys.exit(f"{case.name}: gradient of {name} differs from finite "
                     f"differences ({err:.2e} of {scale:.3g}):\nlamina {got}\n"
                     f"fd {fd}")
        grad_err = max(grad_err, err)
    print(f"{case.name}: forward max abs error {fwd_err:.1e}, "
          f"gradients max rel error {grad_err:.1e}")


def loss_cases():
    rng = np.random.default_rng(0)
    for op, shape, reduction, ii, weighted, itype in itertools.product(
            ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"),
            ((4, 5), (2, 5, 3), (2, 4, 2, 3)), ("none", "sum", "mean"),
            (None, 2, -100), (False, True), (np.int64, np.int32)):
        if itype == np.int32 and (reduction != "mean" or len(shape) != 3):
            continue  # i32 labels: one layout is enough
        classes = shape[1]
        lshape = (shape[0],) + shape[2:]
        labels = rng.integers(0, classes, lshape).astype(itype)
        if ii is not None:
            flat = labels.reshape(-1)
            flat[::3] = ii  # every third position ignored
        name = (f"{'sce' if op[0] == 'S' else 'nll'}-{'x'.join(map(str, shape))}"
                f"-{reduction}-ii{'none' if ii is None else ii}"
                f"-{'w' if weighted else 'nw'}-{np.dtype(itype).name}")
        attrs = {"reduction": reduction}
        if ii is not None:
            attrs["ignore_index"] = ii
        params = {"scores": rng.standard_normal(shape)}
        ins = ["scores", "labels"]
        if weighted:
            params["cw"] = rng.uniform(0.2, 2.0, classes)
            ins.append("cw")
        outs = ["y"]
        if op[0] == "S" and reduction == "mean" and len(shape) == 3:
            outs.append("log_prob")  # the optional second output
        yield Case(name, [helper.make_node(op, ins, outs, **attrs)], params,
                   {"labels": labels}, outs, opset=13 if len(shape) != 2 else 12)
    # What F.nll_loss(F.log_softmax(x, 1), t) exports.
    labels = rng.integers(0, 5, (2, 3))
    labels[0, 1] = -100
    yield Case("nll-after-logsoftmax-2x5x3",
               [helper.make_node("LogSoftmax", ["scores"], ["lp"], axis=1),
                helper.make_node("NegativeLogLikelihoodLoss", ["lp", "labels"],
                                 ["y"], ignore_index=-100)],
               {"scores": rng.standard_normal((2, 5, 3))},
               {"labels": labels}, ["y"])


def element_cases():
    rng = np.random.default_rng(1)
    # GatherElements: every axis, negative indices, indices smaller than the
    # data in the other dims, repeated indices (their gradients add).
    for axis, ishape in ((0, (2, 4)), (1, (3, 2)), (-1, (3, 6)), (1, (2, 1))):
        data = rng.standard_normal((3, 4))
        dim = data.shape[axis]
        idx = rng.integers(-dim, dim, ishape).astype(np.int64)
        yield Case(f"gather-elements-axis{axis}-{'x'.join(map(str, ishape))}",
                   [helper.make_node("GatherElements", ["data", "idx"], ["y"],
                                     axis=axis)],
                   {"data": data}, {"idx": idx}, ["y"])
    data = rng.standard_normal((2, 3, 4))
    idx = rng.integers(-3, 3, (2, 2, 4)).astype(np.int32)
    yield Case("gather-elements-3d-axis1-i32",
               [helper.make_node("GatherElements", ["data", "idx"], ["y"], axis=1)],
               {"data": data}, {"idx": idx}, ["y"])
    # ScatterElements: each reduction (opset 18 has them all); positions
    # unique along the axis for none, repeated for the others.
    for reduction in ("none", "add", "mul", "max", "min"):
        for axis in (0, 1, -1):
            data = rng.standard_normal((3, 4))
            dim = data.shape[axis]
            # Two updates along the axis in every row (axis 1) or column.
            ishape = (2, 3) if axis == 0 else (3, 2)
            if reduction == "none":  # distinct positions: no duplicates
                rows = [rng.permutation(dim)[:2] for _ in range(3)]
                idx = np.stack(rows, axis=1 if axis == 0 else 0)
            else:
                idx = rng.integers(0, dim, ishape)
            idx = (idx - dim * (idx % 2 == 0)).astype(np.int64)  # some negative
            updates = rng.standard_normal(ishape)
            yield Case(f"scatter-elements-{reduction}-axis{axis}",
                       [helper.make_node("ScatterElements", ["data", "idx", "upd"],
                                         ["y"], axis=axis,
                                         **({} if reduction == "none"
                                            else {"reduction": reduction}))],
                       {"data": data, "upd": updates}, {"idx": idx}, ["y"],
                       opset=18)
    # Opset 11's ScatterElements (no reduction attribute).
    yield Case("scatter-elements-opset11",
               [helper.make_node("ScatterElements", ["data", "idx", "upd"], ["y"],
                                 axis=1)],
               {"data": rng.standard_normal((2, 3)),
                "upd": rng.standard_normal((2, 1))},
               {"idx": np.array([[2], [-3]], np.int64)}, ["y"], opset=11)


def main():
    lamina_eval, work = sys.argv[1], sys.argv[2]
    pattern = sys.argv[3] if len(sys.argv) > 3 else ""
    os.makedirs(work, exist_ok=True)
    n = 0
    for case in itertools.chain(loss_cases(), element_cases()):
        if pattern in case.name:
            check_case(case, lamina_eval, work)
            n += 1
    print(f"{n} cases ok")


if __name__ == "__main__":
    main()
