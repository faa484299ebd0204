"""Models, data and checks for train-named-inputs.test (run --data-dir and the
token recipes); prints "ok" or the reason it is not.

  generate OUT.json          (by hand, needs torch) an MLP's weights and a
                             data set, and PyTorch's losses training it on the
                             batches `run --data-dir --seed 3` draws
  mlp JSON OUT.onnx          the MLP: features [4, 6] f32 -> logits [4, 3],
                             with a labels input [4]
  mlp-data JSON DIR          DIR/features.npy (f32) and DIR/labels.npy (i32)
  losses JSON KEY LOG        every logged loss is JSON's KEY within 1e-5
  close A.log B.log RTOL     both logs have the same steps, losses within RTOL
  bad-data DIR OUT          folders of DIR's arrays, each wrong one way
  bert-mlm OUT.onnx          lamina.models' BERT with a masked-LM head
                             (`logits`) and a `labels` input
  seq2seq OUT.onnx           a tiny encoder-decoder: input_ids [2, 6],
                             decoder_input_ids and labels [2, 4]
  recipe R DUMP DATA SEED N [MASK_TOKEN MASK_RATE VOCAB | START]
                             the batch `run --dump-outputs DUMP` wrote after
                             N steps is batch N+1 of recipe R drawn as
                             docs/training.md states it
The sampler (SplitMix64, Fisher-Yates epochs) is lamina.testing.sampler's,
the Python twin of the one the other tests check against.
"""
import json
import os
import re
import sys

import numpy as np

from lamina.testing.sampler import SplitMix64, epoch_order

BATCH, FEATURES, HIDDEN, CLASSES, N = 4, 6, 8, 3, 22


def generate(out):
    import torch
    import torch.nn.functional as F

    rs = np.random.RandomState(7)
    w = {"fc1.weight": rs.randn(HIDDEN, FEATURES) * 0.5,
         "fc1.bias": rs.randn(HIDDEN) * 0.1,
         "fc2.weight": rs.randn(CLASSES, HIDDEN) * 0.5,
         "fc2.bias": rs.randn(CLASSES) * 0.1}
    x = rs.randn(N, FEATURES).astype(np.float32)
    y = rs.randint(0, CLASSES, N)
    y[[3, 11]] = -100  # ignored examples
    ref = {"weights": {k: v.astype(np.float32).tolist() for k, v in w.items()},
           "features": x.tolist(), "labels": y.tolist(), "seed": 3,
           "torch": torch.__version__}
    for opt_name, lr, steps in (("sgd", 0.1, 12), ("adamw", 1e-2, 12)):
        params = {k: torch.tensor(np.asarray(v, np.float32), requires_grad=True)
                  for k, v in ref["weights"].items()}
        opt = (torch.optim.SGD(params.values(), lr=lr) if opt_name == "sgd"
               else torch.optim.AdamW(params.values(), lr=lr))
        order = epoch_order(ref["seed"], N)
        losses = []
        for _ in range(steps):
            idx = [next(order) for _ in range(BATCH)]
            xb = torch.tensor(x[idx])
            yb = torch.tensor(y[idx], dtype=torch.int64)
            h = F.relu(xb @ params["fc1.weight"].T + params["fc1.bias"])
            logits = h @ params["fc2.weight"].T + params["fc2.bias"]
            loss = F.cross_entropy(logits, yb, ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        ref[opt_name] = losses
    with open(out, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


def save(graph, path):
    import onnx
    from onnx import helper
    onnx.save(helper.make_model(graph, ir_version=8,
                                opset_imports=[helper.make_opsetid("", 17)]),
              path)


def mlp(ref, out):
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k)
             for k, v in ref["weights"].items()]
    nodes = [helper.make_node("Gemm", ["features", "fc1.weight", "fc1.bias"],
                              ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"],
                              ["logits"], transB=1)]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT,
                                       [BATCH, FEATURES]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [BATCH])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       [BATCH, CLASSES])], inits)
    save(graph, out)


def losses_of(path):
    out = [float(m.group(1)) for line in open(path)
           if (m := re.match(r"step \d+ loss (\S+) ", line))]
    if not out:
        sys.exit(f"no loss lines in {path}")
    return out


def check_losses(want, log):
    """Prints "ok" when every loss LOG logged is WANT's within 1e-5."""
    got = losses_of(log)
    if len(got) != len(want):
        sys.exit(f"{len(got)} losses logged, the reference has {len(want)}")
    worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
    print(f"worst relative difference {worst:.1e}")
    print("ok" if worst <= 1e-5 else f"too far: {got} vs {want}")


def bert_mlm(out):
    from onnx import TensorProto, helper, numpy_helper
    from lamina.models import build
    vocab, hidden = 40, 32
    model = build("bert", layers=2, hidden=hidden, heads=2, seq=16,
                  vocab=vocab, batch=4)
    g = model.graph
    rs = np.random.RandomState(1)
    g.initializer.extend([
        numpy_helper.from_array((rs.randn(hidden, vocab) * 0.1).astype(np.float32),
                                "cls.predictions.decoder.weight"),
        numpy_helper.from_array(np.zeros(vocab, np.float32),
                                "cls.predictions.bias")])
    g.node.extend([
        helper.make_node("MatMul", ["last_hidden_state",
                                    "cls.predictions.decoder.weight"], ["mm"]),
        helper.make_node("Add", ["mm", "cls.predictions.bias"], ["logits"])])
    g.input.append(helper.make_tensor_value_info("labels", TensorProto.INT64,
                                                 [4, 16]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                  [4, 16, vocab]))
    import onnx
    onnx.save(model, out)


def seq2seq(out):
    """logits[b, t] = dec[decoder_input_ids[b, t]] + mean_s enc[input_ids[b, s]]."""
    from onnx import TensorProto, helper, numpy_helper
    rs = np.random.RandomState(2)
    inits = [numpy_helper.from_array(rs.randn(32, 32).astype(np.float32), "enc"),
             numpy_helper.from_array(rs.randn(32, 32).astype(np.float32), "dec")]
    nodes = [helper.make_node("Gather", ["enc", "input_ids"], ["e"]),
             helper.make_node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=1),
             helper.make_node("Gather", ["dec", "decoder_input_ids"], ["d"]),
             helper.make_node("Add", ["d", "m"], ["logits"])]
    ints = lambda n, s: helper.make_tensor_value_info(n, TensorProto.INT64, s)
    graph = helper.make_graph(
        nodes, "seq2seq",
        [ints("input_ids", [2, 6]), ints("decoder_input_ids", [2, 4]),
         ints("labels", [2, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4, 32])],
        inits)
    save(graph, out)


def recipe(args):
    name, dump, data, seed, steps = args[:5]
    seed, steps = int(seed), int(steps)
    tokens = np.fromfile(data, np.uint16).astype(np.int64)
    got = {f[:-4]: np.load(os.path.join(dump, f))
           for f in os.listdir(dump) if f.endswith(".npy")}
    rng = SplitMix64(seed)
    rows, seq = got["input_ids"].shape
    if name == "masked-lm":
        mask, rate, vocab = int(args[5]), float(args[6]), int(args[7])
        for _ in range(steps + 1):
            ids = np.zeros((rows, seq), np.int64)
            labels = np.full((rows, seq), -100, np.int64)
            for b in range(rows):
                start = rng.below(len(tokens) - seq + 1)
                for j in range(seq):
                    t = tokens[start + j]
                    if rng.uniform() < rate:
                        labels[b, j] = t
                        r = rng.uniform()
                        t = mask if r < 0.8 else rng.below(vocab) if r < 0.9 else t
                    ids[b, j] = t
        want = {"input_ids": ids, "labels": labels}
        chosen = (labels != -100).mean()
        print(f"chosen {chosen:.3f} masked {(ids == mask).sum()} of "
              f"{(labels != -100).sum()}")
    else:  # seq2seq
        start_tok = int(args[5])
        target = got["labels"].shape[1]
        for _ in range(steps + 1):
            starts = [rng.below(len(tokens) - seq - target + 1)
                      for _ in range(rows)]
        ids = np.stack([tokens[s:s + seq] for s in starts])
        labels = np.stack([tokens[s + seq:s + seq + target] for s in starts])
        dec = np.concatenate([np.full((rows, 1), start_tok), labels[:, :-1]], 1)
        want = {"input_ids": ids, "labels": labels, "decoder_input_ids": dec}
    for k, v in want.items():
        if k not in got or not np.array_equal(got[k], v):
            sys.exit(f"{k}: the dumped batch is not the documented one:\n"
                     f"{got.get(k)}\nwant\n{v}")
    print("ok")


def main():
    what = sys.argv[1]
    if what == "generate":
        generate(sys.argv[2])
        return
    if what == "bert-mlm":
        return bert_mlm(sys.argv[2])
    if what == "seq2seq":
        return seq2seq(sys.argv[2])
    if what == "recipe":
        return recipe(sys.argv[2:])
    if what == "bad-data":
        src, out = sys.argv[2:4]
        x = np.load(os.path.join(src, "features.npy"))
        y = np.load(os.path.join(src, "labels.npy"))
        y_range = y.copy()
        y_range[5] = CLASSES
        cases = {"missing": dict(features=x),
                 "shape": dict(features=x[:, :5], labels=y),
                 "f64": dict(features=x.astype(np.float64), labels=y),
                 "floatlabels": dict(features=x, labels=y.astype(np.float32)),
                 "count": dict(features=x[:20], labels=y),
                 "range": dict(features=x, labels=y_range),
                 "mask": dict(features=x, labels=y,
                              attention_mask=np.zeros((N, 4), np.int64)),
                 "extra": dict(features=x, labels=y, extra=y)}
        for case, arrays in cases.items():
            os.makedirs(os.path.join(out, case), exist_ok=True)
            for k, v in arrays.items():
                np.save(os.path.join(out, case, k + ".npy"), v)
        return
    if what == "close":
        a, b = losses_of(sys.argv[2]), losses_of(sys.argv[3])
        worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
        ok = len(a) == len(b) and worst <= float(sys.argv[4])
        print(f"{len(a)} steps, worst relative difference {worst:.1e}")
        print("ok" if ok else f"differ: {a} vs {b}")
        return
    ref = json.load(open(sys.argv[2]))
    if what == "mlp":
        mlp(ref, sys.argv[3])
    elif what == "mlp-data":
        os.makedirs(sys.argv[3], exist_ok=True)
        np.save(os.path.join(sys.argv[3], "features.npy"),
                np.asarray(ref["features"], np.float32))
        np.save(os.path.join(sys.argv[3], "labels.npy"),
                np.asarray(ref["labels"], np.int32))
    elif what == "losses":
        check_losses(ref[sys.argv[3]], sys.argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
