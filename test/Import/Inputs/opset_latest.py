"""Models at the newest default-domain opset under lamina-eval, against
onnxruntime, and the refusals at that opset (opset-latest.test).

  opset_latest.py LAMINA LAMINA_EVAL WORKDIR

The opset is the one the importer accepts last (kMaxOpset, 28), which is
what onnx 1.23 writes by default; onnxruntime 1.32 runs it. Each case uses
the ops whose versions changed after opset 23 (scripts/opset-changes.py):
Cast, CastLike, Constant, ConstantOfShape, Flatten, Identity, Reshape,
Shape, Size, Squeeze, Transpose, Unsqueeze (new element types only),
Range (float16/bfloat16 with stash_type, opset 27), ReduceLogSum and
ReduceLogSumExp (integer types dropped, opset 28). Outputs must equal
onnxruntime's (floats within 1e-6 relative, the rest exact).
"""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

OPSET = 28


def make(name, nodes, inputs, outputs, inits=(), functions=(), opset=OPSET,
         extra_opsets=()):
    g = h.make_graph(nodes, name, inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset),
                                       *extra_opsets],
                     functions=list(functions))
    return m  # ir_version: what this onnx writes (14 for onnx 1.23)


def vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def scalar(name, value, dtype):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def shape_ops():
    x = vi("x", T.FLOAT, [2, 3, 4])
    nodes = [
        h.make_node("Constant", [], ["shape"],
                    value=numpy_helper.from_array(np.array([4, 6], np.int64))),
        h.make_node("Reshape", ["x", "shape"], ["r"]),
        h.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
        h.make_node("Flatten", ["x"], ["f"], axis=2),
        h.make_node("Unsqueeze", ["t", "ax"], ["u"]),
        h.make_node("Squeeze", ["u", "ax"], ["sq"]),
        h.make_node("Identity", ["sq"], ["id"]),
        h.make_node("Shape", ["x"], ["shp"]),
        h.make_node("Size", ["x"], ["size"]),
        h.make_node("ConstantOfShape", ["shp"], ["cos"],
                    value=numpy_helper.from_array(np.array([1.5], np.float32))),
        h.make_node("Add", ["x", "cos"], ["plus"]),
        h.make_node("Cast", ["plus"], ["i"], to=T.INT32),
        h.make_node("CastLike", ["i", "x"], ["back"]),
        h.make_node("Cast", ["x"], ["half"], to=T.FLOAT16),
        h.make_node("ReduceLogSum", ["back", "axes"], ["rls"], keepdims=0),
        h.make_node("ReduceLogSumExp", ["x", "axes"], ["rlse"], keepdims=1),
    ]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    outs = [vi("id", T.FLOAT, None), vi("f", T.FLOAT, None),
            vi("shp", T.INT64, None), vi("size", T.INT64, None),
            vi("i", T.INT32, None), vi("half", T.FLOAT16, None),
            vi("rls", T.FLOAT, None), vi("rlse", T.FLOAT, None)]
    feeds = {"x": np.random.default_rng(0).uniform(0.5, 3, (2, 3, 4))
             .astype(np.float32)}
    return make("shape_ops", nodes, [x], outs, inits), feeds


def ranges():
    """Range at 28: float16 with the default stash_type (FLOAT) and with
    DOUBLE, float32, int64. 2040..2050 step 1 in float16: 2049 rounds to
    2048 (float16 spacing is 2 there)."""
    nodes, outs, inits = [], [], []
    cases = [("h_default", np.float16, 2040, 2050, 1, {}),
             ("h_double", np.float16, -3, 3, 0.25, {"stash_type": T.DOUBLE}),
             ("h_float", np.float16, 1, 0, -0.1, {"stash_type": T.FLOAT}),
             ("f32", np.float32, 0, 1, 0.1, {}),
             ("i64", np.int64, 10, -3, -4, {})]
    for name, dtype, s, l, d, attrs in cases:
        for part, v in (("s", s), ("l", l), ("d", d)):
            inits.append(scalar(f"{name}_{part}", v, dtype))
        nodes.append(h.make_node("Range", [f"{name}_s", f"{name}_l", f"{name}_d"],
                                 [name], **attrs))
        outs.append(vi(name, h.np_dtype_to_tensor_dtype(np.dtype(dtype)), None))
    # A graph input keeps the model from being folded away entirely.
    nodes.append(h.make_node("Identity", ["x"], ["x_out"]))
    outs.append(vi("x_out", T.FLOAT, None))
    return (make("ranges", nodes, [vi("x", T.FLOAT, [2])], outs, inits),
            {"x": np.array([1, 2], np.float32)})


def function_at_latest():
    """A model-local function importing the same opset, inlined."""
    fn = h.make_function("local", "Twice", ["a"], ["b"],
                         [h.make_node("Cast", ["a"], ["c"], to=T.DOUBLE),
                          h.make_node("Add", ["c", "c"], ["d"]),
                          h.make_node("CastLike", ["d", "a"], ["b"])],
                         opset_imports=[h.make_opsetid("", OPSET)])
    nodes = [h.make_node("Twice", ["x"], ["y"], domain="local")]
    m = make("function", nodes, [vi("x", T.FLOAT, [3])], [vi("y", T.FLOAT, None)],
             functions=[fn], extra_opsets=[h.make_opsetid("local", 1)])
    return m, {"x": np.array([1, -2, 3.5], np.float32)}


def refusals():
    """(label, model) pairs that must be refused."""
    x = vi("x", T.FLOAT16, [])
    out = vi("y", T.FLOAT16, None)
    inits = [scalar("s", 0, np.float16), scalar("l", 4, np.float16),
             scalar("d", 1, np.float16)]
    yield "range_stash_float16", make(
        "r", [h.make_node("Range", ["s", "l", "d"], ["y"], name="range_node",
                          stash_type=T.FLOAT16)], [x], [out], inits)
    yield "cast_float8e8m0", make(
        "c", [h.make_node("Cast", ["x"], ["y"], name="cast_node",
                          to=T.FLOAT8E8M0, round_mode="nearest")],
        [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT8E8M0, None)])
    add = [h.make_node("Add", ["x", "x"], ["y"])]
    io = ([vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, None)])
    yield "opset29", make("o", add, *io, opset=OPSET + 1)
    fn = h.make_function("local", "Newer", ["a"], ["b"],
                         [h.make_node("Add", ["a", "a"], ["b"])],
                         opset_imports=[h.make_opsetid("", OPSET + 1)])
    yield "function_opset29", make(
        "f", [h.make_node("Newer", ["x"], ["y"], domain="local")], *io,
        functions=[fn], extra_opsets=[h.make_opsetid("local", 1)])


def run_case(name, model, feeds, lamina_eval, work):
    path = os.path.join(work, name + ".onnx")
    onnx.save(model, path)
    indir, outdir = path + ".in", path + ".out"
    os.makedirs(indir, exist_ok=True)
    cmd = [lamina_eval, path, "--output-dir", outdir]
    for k, v in feeds.items():
        np.save(os.path.join(indir, k + ".npy"), v)
        cmd += ["--input", f"{k}={indir}/{k}.npy"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name}: lamina-eval failed\n{r.stderr}")
    sess = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for o, want in zip(names, sess.run(None, feeds)):
        got = np.load(os.path.join(outdir, o + ".npy"))
        if got.shape != want.shape or got.dtype != want.dtype:
            sys.exit(f"{name}/{o}: lamina {got.dtype}{list(got.shape)}, "
                     f"onnxruntime {want.dtype}{list(want.shape)}")
        if np.issubdtype(want.dtype, np.floating):
            ok = np.allclose(got.astype(np.float64), want.astype(np.float64),
                             rtol=1e-6, atol=0)
        else:
            ok = np.array_equal(got, want)
        if not ok:
            sys.exit(f"{name}/{o}: lamina {got.ravel()[:12]}, "
                     f"onnxruntime {want.ravel()[:12]}")
    print(f"{name}: opset {OPSET} ir {model.ir_version} equals onnxruntime "
          f"({', '.join(names)})")


def main():
    lamina, lamina_eval, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    for name, build in (("shape_ops", shape_ops), ("ranges", ranges),
                        ("function", function_at_latest)):
        model, feeds = build()
        run_case(name, model, feeds, lamina_eval, work)
    for name, model in refusals():
        path = os.path.join(work, name + ".onnx")
        onnx.save(model, path)
        r = subprocess.run([lamina, "import", path], capture_output=True,
                           text=True)
        if r.returncode == 0:
            sys.exit(f"{name}: imported, expected a refusal")
        errors = [l for l in r.stderr.splitlines() if "error:" in l]
        print(f"{name}: {errors[0].split('error: ', 1)[1] if errors else r.stderr}")


if __name__ == "__main__":
    main()
