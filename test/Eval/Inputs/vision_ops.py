"""Conv, MaxPool, AveragePool, the global pools and BatchNormalization under
lamina-eval, against onnxruntime (vision-ops.test), with loss_ops.py's
checks: the forward outputs equal onnxruntime's (rtol 1e-5, atol 1e-6) and
the gradients of every float initializer (the data input included; not
batch norm's statistics, which stay constants) equal central finite
differences of onnxruntime in f64.

  vision_ops.py LAMINA_EVAL WORKDIR [FILTER]
"""
import itertools
import os
import sys

import numpy as np
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loss_ops import Case, check_case  # noqa: E402


def conv_cases():
    rng = np.random.default_rng(2)
    # (name, x shape, w shape, attributes, bias)
    specs = [
        ("conv2d-pad1-bias", (2, 3, 5, 5), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True),
        ("conv2d-stride2-dil2-asym-group2", (2, 4, 7, 6), (6, 2, 2, 3),
         dict(strides=[2, 1], dilations=[2, 2], pads=[1, 0, 0, 2], group=2), True),
        ("conv2d-same-upper-stride2", (1, 2, 5, 6), (3, 2, 3, 2),
         dict(strides=[2, 2], auto_pad="SAME_UPPER"), False),
        ("conv2d-same-lower", (1, 2, 4, 5), (2, 2, 2, 3),
         dict(auto_pad="SAME_LOWER"), True),
        ("conv2d-valid", (1, 2, 5, 5), (2, 2, 3, 3), dict(auto_pad="VALID"), False),
        ("conv2d-depthwise", (2, 3, 4, 4), (3, 1, 3, 3),
         dict(pads=[1, 1, 1, 1], group=3), True),
        ("conv2d-pointwise", (2, 3, 3, 4), (5, 3, 1, 1), {}, True),
        ("conv2d-patches", (2, 3, 8, 8), (4, 3, 4, 4), dict(strides=[4, 4]), True),
        ("conv1d-stride2-group", (2, 4, 9), (4, 2, 3),
         dict(strides=[2], pads=[1, 2], group=2), True),
        ("conv3d", (1, 2, 3, 4, 4), (2, 2, 2, 2, 3), dict(pads=[0, 1, 1, 1, 0, 1]), True),
    ]
    for name, xs, ws, attrs, bias in specs:
        params = {"x": rng.standard_normal(xs), "w": rng.standard_normal(ws) * 0.5}
        ins = ["x", "w"]
        if bias:
            params["b"] = rng.standard_normal(ws[0])
            ins.append("b")
        yield Case(name, [helper.make_node("Conv", ins, ["y"], **attrs)],
                   params, {}, ["y"], opset=11 if "1d" in name else 17)


def pool_cases():
    rng = np.random.default_rng(3)
    specs = [
        ("maxpool2d-k2", "MaxPool", (2, 3, 6, 6), dict(kernel_shape=[2, 2], strides=[2, 2]), 17),
        ("maxpool2d-k3-s2-p1", "MaxPool", (1, 2, 7, 7),
         dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 12),
        ("maxpool2d-ceil", "MaxPool", (1, 2, 6, 7),
         dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1), 17),
        # (onnxruntime pads SAME as if the kernel were not dilated, unlike
        # the ONNX specification: SAME and dilation are tested apart.)
        ("maxpool2d-dilation", "MaxPool", (1, 1, 6, 6),
         dict(kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 0, 0, 1]), 12),
        ("maxpool2d-same-upper-stride2", "MaxPool", (1, 2, 5, 6),
         dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), 17),
        ("maxpool1d", "MaxPool", (2, 2, 9), dict(kernel_shape=[3], strides=[2]), 11),
        ("maxpool3d", "MaxPool", (1, 1, 4, 4, 4), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), 17),
        ("avgpool2d-exclude-pad", "AveragePool", (1, 2, 5, 5),
         dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 11),
        ("avgpool2d-include-pad", "AveragePool", (1, 2, 5, 5),
         dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), 17),
        ("avgpool2d-ceil", "AveragePool", (1, 2, 6, 7),
         dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1), 17),
        ("avgpool2d-dilation", "AveragePool", (1, 1, 6, 6),
         dict(kernel_shape=[2, 2], dilations=[2, 2]), 19),
        ("avgpool1d-same-lower", "AveragePool", (2, 2, 7),
         dict(kernel_shape=[3], strides=[2], auto_pad="SAME_LOWER"), 11),
        ("globalaveragepool", "GlobalAveragePool", (2, 3, 3, 4), {}, 17),
        ("globalmaxpool", "GlobalMaxPool", (2, 3, 3, 4), {}, 17),
    ]
    for name, op, xs, attrs, opset in specs:
        yield Case(name, [helper.make_node(op, ["x"], ["y"], **attrs)],
                   {"x": rng.standard_normal(xs)}, {}, ["y"], opset=opset)


def batchnorm_cases():
    rng = np.random.default_rng(4)
    for shape, training, opset in itertools.product(
            ((4, 3, 2, 3), (3, 2, 5)), (False, True), (15, 14)):
        c = shape[1]
        params = {"x": rng.standard_normal(shape) * 2 + 1,
                  "scale": rng.uniform(0.5, 1.5, c), "bias": rng.standard_normal(c),
                  "mean": rng.standard_normal(c), "var": rng.uniform(0.5, 2.0, c)}
        outs = ["y", "running_mean", "running_var"] if training else ["y"]
        attrs = dict(epsilon=1e-3, momentum=0.8)
        if training:
            attrs["training_mode"] = 1
        yield Case(f"batchnorm-{'x'.join(map(str, shape))}-"
                   f"{'training' if training else 'inference'}-opset{opset}",
                   [helper.make_node("BatchNormalization",
                                     ["x", "scale", "bias", "mean", "var"], outs,
                                     **attrs)],
                   params, {}, outs, opset=opset, constants=("mean", "var"))
    # Opset 11 inference (one output).
    c = 3
    yield Case("batchnorm-opset11-inference",
               [helper.make_node("BatchNormalization",
                                 ["x", "scale", "bias", "mean", "var"], ["y"])],
               {"x": rng.standard_normal((2, c, 4)), "scale": rng.uniform(0.5, 1.5, c),
                "bias": rng.standard_normal(c), "mean": rng.standard_normal(c),
                "var": rng.uniform(0.5, 2.0, c)},
               {}, ["y"], opset=11, constants=("mean", "var"))


def device_model(out):
    """One model of the ops' less common forms (1-D and 3-D convolutions,
    ceil_mode, count_include_pad, dilations, MaxPool's Indices), for
    compare_ort on the CUDA kernel emulator (vision-cuda-emulated.test)."""
    import onnx
    from onnx import TensorProto, numpy_helper
    rng = np.random.default_rng(5)
    w = {"w1": rng.standard_normal((4, 2, 3)), "w3": rng.standard_normal((2, 4, 2, 2, 3)),
         "w2": rng.standard_normal((6, 2, 3, 3)), "b2": rng.standard_normal(6)}
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["x1"]),
        helper.make_node("Conv", ["x1", "w1"], ["c1"], strides=[2], pads=[1, 2], group=2),
        helper.make_node("Reshape", ["x", "s3"], ["x3"]),
        helper.make_node("Conv", ["x3", "w3"], ["c3"], pads=[0, 1, 1, 1, 0, 1]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], strides=[2, 1],
                         dilations=[1, 2], pads=[1, 0, 2, 1], group=2),
        helper.make_node("MaxPool", ["x"], ["m", "mi"], kernel_shape=[3, 2],
                         strides=[2, 2], ceil_mode=1, storage_order=1),
        helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], count_include_pad=1, strides=[2, 2],
                         ceil_mode=1),
        helper.make_node("AveragePool", ["x"], ["ad"], kernel_shape=[2, 2],
                         dilations=[2, 1]),
    ]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()]
    inits += [numpy_helper.from_array(np.array([2, 4, 48], np.int64), "s1"),
              numpy_helper.from_array(np.array([2, 4, 3, 4, 4], np.int64), "s3")]
    g = helper.make_graph(
        nodes, "vision", [helper.make_tensor_value_info("x", f, [2, 4, 6, 8])],
        [helper.make_tensor_value_info(o, f, None) for o in ("c1", "c3", "c2", "m", "a", "ad")]
        + [helper.make_tensor_value_info("mi", TensorProto.INT64, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.save(m, out)


def main():
    if sys.argv[1] == "device-model":
        return device_model(sys.argv[2])
    lamina_eval, work = sys.argv[1], sys.argv[2]
    pattern = sys.argv[3] if len(sys.argv) > 3 else ""
    os.makedirs(work, exist_ok=True)
    n = 0
    for case in itertools.chain(conv_cases(), pool_cases(), batchnorm_cases()):
        if pattern in case.name:
            check_case(case, lamina_eval, work)
            n += 1
    print(f"{n} cases ok")


if __name__ == "__main__":
    main()
