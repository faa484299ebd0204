#!/usr/bin/env python3
"""Export a tiny Hugging Face GPT-2 with PyTorch's real ONNX exporters.

    python3 python/lamina/export_real_models.py [OUTDIR]   (default /tmp/lamina-real-exports)

Needs ``torch`` and ``transformers`` (PyPI), and ``onnxscript`` for the
dynamo exporter. Writes, from one randomly initialised model (seed 0):

  gpt2_torchscript_opset14.onnx  torch.onnx.export(dynamo=False), opset 14
  gpt2_dynamo_opset18.onnx       torch.onnx.export(dynamo=True), opset 18

both with symbolic ``batch``/``seq`` dims and output ``logits``, plus
``reference.npz`` (input_ids and PyTorch's logits) to compare against.
The two .onnx files are committed in test/Inputs/models/ (what lamina.models
imitates is checked against them).
"""

from __future__ import annotations

import collections
import os
import sys
import warnings

import numpy as np
import onnx

TINY = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=64,
            bos_token_id=0, eos_token_id=0)


def _tiny_gpt2():
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config = tf.GPT2Config(**TINY)
    config._attn_implementation = "eager"  # plain MatMul/Softmax, no SDPA op
    net = tf.GPT2LMHeadModel(config).eval()

    class LogitsOnly(torch.nn.Module):
        """input_ids -> logits, no KV cache, so both exporters see one tensor out.

        An all-ones attention_mask is passed because, without one,
        transformers >= 5 probes position_ids for packed sequences with
        torch.diff, which the TorchScript exporter cannot export."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            mask = torch.ones_like(input_ids)
            return self.inner(input_ids=input_ids, attention_mask=mask,
                              use_cache=False).logits

    return LogitsOnly(net).eval()


def export_torchscript(model, ids, path):
    import torch

    torch.onnx.export(model, (ids,), path, dynamo=False, opset_version=14,
                      input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                    "logits": {0: "batch", 1: "seq"}})


def export_dynamo(model, ids, path):
    import torch

    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=TINY["n_positions"])
    prog = torch.onnx.export(model, (ids,), dynamo=True, opset_version=18,
                             input_names=["input_ids"], output_names=["logits"],
                             dynamic_shapes={"input_ids": {0: batch, 1: seq}})
    prog.save(path)  # small enough to stay in one file


def describe(path) -> str:
    m = onnx.load(path)
    ops = collections.Counter(n.op_type for n in m.graph.node)
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in m.graph.input]
    fns = f", {len(m.functions)} functions" if m.functions else ""
    return (f"{os.path.basename(path)}: {os.path.getsize(path):,} bytes, "
            f"opset {m.opset_import[0].version}, ir {m.ir_version}, "
            f"{len(m.graph.node)} nodes, {len(m.graph.initializer)} initializers{fns}\n"
            f"  inputs {[i.name for i in m.graph.input]} {dims}\n"
            f"  ops {dict(sorted(ops.items()))}\n"
            f"  first nodes {[n.name for n in m.graph.node[:4]]}\n"
            f"  first initializers {[t.name for t in m.graph.initializer[:4]]}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = argv[0] if argv else "/tmp/lamina-real-exports"
    try:
        import torch
    except ImportError as e:
        print(f"needs torch and transformers: {e}", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    model = _tiny_gpt2()
    ids = torch.randint(0, TINY["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(ids).numpy()
    np.savez(os.path.join(out, "reference.npz"), input_ids=ids.numpy(), logits=want)
    status = 0
    for name, fn in (("gpt2_torchscript_opset14.onnx", export_torchscript),
                     ("gpt2_dynamo_opset18.onnx", export_dynamo)):
        path = os.path.join(out, name)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(model, ids, path)
        except Exception as e:  # noqa: BLE001 - report and try the other exporter
            print(f"{name}: export failed: {type(e).__name__}: {str(e)[:300]}")
            status = 1
            continue
        onnx.checker.check_model(path, full_check=True)
        print(describe(path))
        try:
            import onnxruntime as ort
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            got = sess.run(None, {"input_ids": ids.numpy()})[0]
            print(f"  onnxruntime vs torch: max abs diff {np.abs(got - want).max():.2e}")
        except ImportError:
            pass
    return status


if __name__ == "__main__":
    sys.exit(main())
