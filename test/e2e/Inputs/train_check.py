"""Checks for train-tiny-gpt.test; prints "ok" or the reason it is not.

  loss LOG                           last logged loss < 10% of the first
  falls LOG                          last logged loss < the first
  same FULL RESUMED                  every step the resumed run logs has the
                                     uninterrupted run's loss
  frozen ORIG TRAINED REGEX          initializers matching REGEX are unchanged,
                                     some others changed
  square-model OUT.onnx              writes a model whose output is its loss
  bigram-model OUT.onnx              writes a model with a labels input
  bias-model OUT.onnx                writes a model with a 1-D parameter whose
                                     gradient is zero (only weight decay
                                     moves it)
  ort-outputs MODEL DUMPDIR           onnxruntime on DUMPDIR's inputs gives
                                     DUMPDIR's outputs (run --dump-outputs)
  export ORIG TRAINED DATA LOG       onnxruntime's causal-LM loss on the corpus
                                     is below 10% of the first logged loss for
                                     the exported model, and not for the
                                     original one
  val MODEL DATA LOG STEP BATCHES [RTOL]
                                     onnxruntime's mean causal-LM loss on the
                                     windows `run --eval-data DATA
                                     --eval-batches BATCHES` draws is the
                                     validation loss LOG has at STEP (within
                                     RTOL, default 1e-5)
"""
import os
import re
import sys

import numpy as np


def losses(path):
    out = []
    for line in open(path):
        m = re.match(r"step (\d+) loss (\S+) ", line)
        if m:
            out.append((int(m.group(1)), float(m.group(2)), line))
    if not out:
        sys.exit(f"no loss lines in {path}")
    return out


def ort_loss(model, data, ids=None):
    """The causal-LM loss of `ids` (default: windows of `data` 3 tokens
    apart) under onnxruntime."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    batch, seq = inp.shape
    if ids is None:
        ids = np.stack([data[b * 3:b * 3 + seq] for b in range(batch)])
    ids = ids.astype(np.int64 if "int64" in inp.type else np.int32)
    (logits,) = sess.run(["logits"], {inp.name: ids})
    logits = logits[:, :-1].astype(np.float64)
    labels = ids[:, 1:]
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-np.take_along_axis(logp, labels[..., None], -1).mean())


def main():
    what = sys.argv[1]
    if what == "loss":
        ls = losses(sys.argv[2])
        first, last = ls[0][1], ls[-1][1]
        print(f"loss: step {ls[0][0]} {first:.6f} -> step {ls[-1][0]} {last:.6f}",
              file=sys.stderr)
        print("ok" if last < 0.1 * first else f"loss {first} -> {last}")
    elif what == "falls":
        ls = losses(sys.argv[2])
        print("ok" if ls[-1][1] < ls[0][1] else f"loss {ls[0][1]} -> {ls[-1][1]}")
    elif what == "same":
        # Every step both logged (the resumed run's), loss as printed.
        full = {step: loss for step, loss, _ in losses(sys.argv[2])}
        resumed = losses(sys.argv[3])
        bad = [line.strip() for step, loss, line in resumed
               if full.get(step) != loss]
        print("ok" if not bad else "resumed run differs: " + "; ".join(bad))
    elif what == "export":
        orig, trained, data, log = sys.argv[2:6]
        tokens = np.fromfile(data, dtype=np.uint16)
        first = losses(log)[0][1]
        lo, lt = ort_loss(orig, tokens), ort_loss(trained, tokens)
        print(f"onnxruntime loss: original {lo:.6f}, exported {lt:.6f}",
              file=sys.stderr)
        print("ok" if lt < 0.1 * first <= lo else f"original {lo}, exported {lt}, first logged {first}")
    elif what == "val":
        import onnx

        from lamina.testing.sampler import EVAL_SEED, SplitMix64, windows
        model, data, log, step, count = sys.argv[2:7]
        rtol = float(sys.argv[7]) if len(sys.argv) > 7 else 1e-5
        logged = None
        for line in open(log):
            m = re.match(rf"step {step} val loss (\S+) ", line)
            if m:
                logged = float(m.group(1))
        if logged is None:
            sys.exit(f"no validation loss at step {step} in {log}")
        dims = onnx.load(model, load_external_data=False).graph.input[0]
        batch, seq = (d.dim_value for d in dims.type.tensor_type.shape.dim)
        tokens = np.fromfile(data, dtype=np.uint16)
        rng = SplitMix64(EVAL_SEED)
        want = np.mean([ort_loss(model, None, windows(tokens, batch, seq, rng))
                        for _ in range(int(count))])
        err = abs(logged - want) / abs(want)
        print(f"val loss at step {step}: logged {logged:.6f}, onnxruntime "
              f"{want:.6f} (rel {err:.1e})", file=sys.stderr)
        print("ok" if err < rtol else f"logged {logged}, onnxruntime {want}")
    elif what == "frozen":
        import onnx
        from onnx import numpy_helper

        def inits(path):
            return {t.name: numpy_helper.to_array(t)
                    for t in onnx.load(path).graph.initializer}
        a, b = inits(sys.argv[2]), inits(sys.argv[3])
        pattern = re.compile(sys.argv[4])
        frozen = [n for n in a if pattern.search(n)]
        changed = [n for n in a if not np.array_equal(a[n], b[n])]
        ok = frozen and all(n not in changed for n in frozen) and changed
        print("ok" if ok else f"frozen {frozen}, changed {changed}")
    elif what == "square-model":
        # A model with its own scalar loss: mean(emb[input_ids]^2).
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        emb = numpy_helper.from_array(
            np.random.RandomState(0).randn(32, 8).astype(np.float32), "emb")
        nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
                 helper.make_node("Mul", ["h", "h"], ["sq"]),
                 helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0)]
        graph = helper.make_graph(
            nodes, "square",
            [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2, 4])],
            [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], [emb])
        onnx.save(helper.make_model(graph, ir_version=8,
                                    opset_imports=[helper.make_opsetid("", 17)]),
                  sys.argv[2])
    elif what == "bigram-model":
        # logits = emb[input_ids], with a separate labels input.
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        emb = numpy_helper.from_array(
            np.random.RandomState(0).randn(32, 32).astype(np.float32), "emb")
        ids = [helper.make_tensor_value_info(n, TensorProto.INT64, [2, 4])
               for n in ("input_ids", "labels")]
        graph = helper.make_graph(
            [helper.make_node("Gather", ["emb", "input_ids"], ["logits"])],
            "bigram", ids,
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4, 32])],
            [emb])
        onnx.save(helper.make_model(graph, ir_version=8,
                                    opset_imports=[helper.make_opsetid("", 17)]),
                  sys.argv[2])
    elif what == "bias-model":
        # logits = emb[input_ids] + 0 * bias: the bias's gradient is zero.
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.RandomState(0)
        inits = [numpy_helper.from_array(rng.randn(32, 32).astype(np.float32), "emb"),
                 numpy_helper.from_array(rng.randn(32).astype(np.float32), "bias"),
                 numpy_helper.from_array(np.zeros(1, np.float32), "zero")]
        nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
                 helper.make_node("Mul", ["bias", "zero"], ["b0"]),
                 helper.make_node("Add", ["h", "b0"], ["logits"])]
        graph = helper.make_graph(
            nodes, "bias",
            [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2, 4])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4, 32])],
            inits)
        onnx.save(helper.make_model(graph, ir_version=8,
                                    opset_imports=[helper.make_opsetid("", 17)]),
                  sys.argv[2])
    elif what == "ort-outputs":
        # The exported model in onnxruntime on the batch `run --dump-outputs`
        # wrote gives the outputs the trained program computed for it.
        import onnxruntime as ort
        model, dump = sys.argv[2], sys.argv[3]
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        feeds = {i.name: np.load(os.path.join(dump, i.name + ".npy"))
                 for i in sess.get_inputs()}
        worst = 0.0
        for o, got in zip(sess.get_outputs(), sess.run(None, feeds)):
            want = np.load(os.path.join(dump, o.name + ".npy"))
            err = float(np.abs(got - want).max() / max(1e-6, np.abs(want).max()))
            print(f"{o.name}: max rel error {err:.1e}")
            worst = max(worst, err)
        print("ok" if worst < 1e-5 else f"differs: {worst}")
    else:
        sys.exit(f"unknown check {what}")


if __name__ == "__main__":
    main()
