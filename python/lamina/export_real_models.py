#!/usr/bin/env python3
"""Export tiny Hugging Face models with PyTorch's real ONNX exporters, and
train them in PyTorch for reference.

    python3 python/lamina/export_real_models.py [OUTDIR]   (default /tmp/lamina-real-exports)

Needs ``torch`` and ``transformers`` (PyPI), and ``onnxscript`` for the
dynamo exporter. For each model, randomly initialised (seed 0), it writes

  <model>_torchscript_opset14.onnx  torch.onnx.export(dynamo=False), opset 14
  <model>_dynamo_opset18.onnx       torch.onnx.export(dynamo=True), opset 18
  gpt2_dynamo_mask_opset18.onnx,    the same with attention_mask and
  llama_torchscript_mask_opset14.onnx  position_ids inputs too

all with symbolic ``batch``/``seq`` dims and output ``logits``,
``<model>_reference.npz`` (input_ids and PyTorch's logits) and
``hf-<model>-training.json``: PyTorch training the same model on a fixed
token corpus with the batches a compiled ``run --data`` draws (the
SplitMix64 sampler of include/lamina/Runtime/TokenData.h), SGD and AdamW,
the loss of every step. The models are

  gpt2   GPT2LMHeadModel: 2 layers, hidden 32, 4 heads, vocab 64
  llama  LlamaForCausalLM: 2 layers, hidden 32, 4 query and 2 kv heads
         (grouped-query attention), SwiGLU 64, RMSNorm, rotary, vocab 64

Both use transformers' eager attention (plain MatMul/Softmax). The .onnx
and .json files are committed in test/Inputs/models/ and
test/Inputs/reference/ (test/e2e/hf-training-reference.test).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import warnings

import numpy as np
import onnx

from lamina.testing.sampler import SplitMix64, windows

VOCAB = 64
POSITIONS = 64
GPT2 = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB,
            n_positions=POSITIONS, bos_token_id=0, eos_token_id=0)
LLAMA = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=64, vocab_size=VOCAB,
             max_position_embeddings=POSITIONS, tie_word_embeddings=False,
             bos_token_id=0, eos_token_id=0)

# The training reference: corpus, batches and optimizers.
BATCH, SEQ, SEED = 4, 16, 1
RUNS = {"sgd": dict(lr=0.1, steps=20), "adamw": dict(lr=1e-2, steps=10)}


def _tiny(kind: str):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    if kind == "gpt2":
        net = tf.GPT2LMHeadModel(eager(tf.GPT2Config(**GPT2)))
    else:
        net = tf.LlamaForCausalLM(eager(tf.LlamaConfig(**LLAMA)))
    return logits_only(net)


def logits_only(net):
    """`net` as input_ids -> logits, no KV cache, so both exporters see one
    tensor out; in eval mode (no dropout, as the exported graph has none).

    An all-ones attention_mask is passed because, without one, transformers
    >= 5 probes position_ids for packed sequences with torch.diff, which the
    TorchScript exporter cannot export."""
    import torch

    class LogitsOnly(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            mask = torch.ones_like(input_ids)
            return self.inner(input_ids=input_ids, attention_mask=mask,
                              use_cache=False).logits

    return LogitsOnly(net).eval()


def eager(config):
    config._attn_implementation = "eager"  # plain MatMul/Softmax, no SDPA op
    return config


class _WithMask:
    """The model with the inputs Optimum-style exports have: input_ids,
    attention_mask and position_ids (lamina fills the last two for
    training on packed windows)."""

    @staticmethod
    def wrap(model):
        import torch

        class WithMask(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask, position_ids):
                return self.inner(input_ids=input_ids,
                                  attention_mask=attention_mask,
                                  position_ids=position_ids,
                                  use_cache=False).logits

        return WithMask(model.inner).eval()


MASK_INPUTS = ["input_ids", "attention_mask", "position_ids"]


def export_masked(model, ids, path, dynamo):
    import torch

    wrapped = _WithMask.wrap(model)
    args = (ids, torch.ones_like(ids), torch.arange(ids.shape[1]).expand_as(ids))
    if dynamo:
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=POSITIONS)
        prog = torch.onnx.export(wrapped, args, dynamo=True, opset_version=18,
                                 input_names=MASK_INPUTS, output_names=["logits"],
                                 dynamic_shapes={n: {0: batch, 1: seq} for n in MASK_INPUTS})
        prog.save(path)
    else:
        torch.onnx.export(wrapped, args, path, dynamo=False, opset_version=14,
                          input_names=MASK_INPUTS, output_names=["logits"],
                          dynamic_axes={n: {0: "batch", 1: "seq"}
                                        for n in MASK_INPUTS + ["logits"]})


def export_torchscript(model, ids, path):
    import torch

    torch.onnx.export(model, (ids,), path, dynamo=False, opset_version=14,
                      input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                    "logits": {0: "batch", 1: "seq"}})


def export_dynamo(model, ids, path):
    import torch

    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=POSITIONS)
    prog = torch.onnx.export(model, (ids,), dynamo=True, opset_version=18,
                             input_names=["input_ids"], output_names=["logits"],
                             dynamic_shapes={"input_ids": {0: batch, 1: seq}})
    prog.save(path)  # small enough to stay in one file


def corpus(n: int = 4096) -> list[int]:
    """A learnable token stream: a repeating motif with a slow drift."""
    return [(i * 7 + (i // 13) * 5) % VOCAB for i in range(n)]


def batches(tokens, steps):
    rng = SplitMix64(SEED)
    for _ in range(steps):
        yield windows(tokens, BATCH, SEQ, rng)


def train_losses(model, tokens, optimizer: str, lr: float, steps: int,
                 vocab: int = VOCAB) -> list[float]:
    """PyTorch training `model` on the sampler's batches of `tokens`: the
    loss of every step. lamina's causal-lm loss is the same mean
    cross-entropy of position t against token t + 1."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = (torch.optim.SGD(params, lr=lr) if optimizer == "sgd"
           else torch.optim.AdamW(params, lr=lr))
    losses = []
    for ids in batches(tokens, steps):
        ids = torch.from_numpy(ids)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_reference(kind: str, tokens) -> dict:
    return {name: dict(run, losses=train_losses(_tiny(kind), tokens, name,
                                                 run["lr"], run["steps"]))
            for name, run in RUNS.items()}


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


def export(kind: str, out: str) -> int:
    import torch

    model = _tiny(kind)
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(ids).numpy()
    np.savez(os.path.join(out, f"{kind}_reference.npz"), input_ids=ids.numpy(),
             logits=want)
    status = 0
    # One exporter each with the attention-mask and position inputs too.
    masked = ((f"gpt2_dynamo_mask_opset18.onnx",
               lambda m, i, p: export_masked(m, i, p, dynamo=True))
              if kind == "gpt2" else
              (f"llama_torchscript_mask_opset14.onnx",
               lambda m, i, p: export_masked(m, i, p, dynamo=False)))
    for name, fn in ((f"{kind}_torchscript_opset14.onnx", export_torchscript),
                     (f"{kind}_dynamo_opset18.onnx", export_dynamo), masked):
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
            feeds = {"input_ids": ids.numpy()}
            if len(sess.get_inputs()) == 3:
                feeds["attention_mask"] = np.ones_like(feeds["input_ids"])
                feeds["position_ids"] = np.broadcast_to(
                    np.arange(ids.shape[1]), ids.shape).copy()
            got = sess.run(None, feeds)[0]
            print(f"  onnxruntime vs torch: max abs diff {np.abs(got - want).max():.2e}")
        except ImportError:
            pass
    tokens = corpus()
    ref = dict(models=[f"{kind}_torchscript_opset14.onnx", f"{kind}_dynamo_opset18.onnx"],
               torch=torch.__version__, batch=BATCH, seq=SEQ, seed=SEED,
               vocab=VOCAB, runs=train_reference(kind, tokens), tokens=tokens)
    path = os.path.join(out, f"hf-{kind}-training.json")
    with open(path, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    for name, run in ref["runs"].items():
        print(f"{path}: {name} {run['losses'][0]:.6f} -> {run['losses'][-1]:.6f}")
    return status


def run_exports(argv, default_out: str, export_one, kinds) -> int:
    """`SCRIPT [OUTDIR [KIND...]]`: export_one(kind, OUTDIR) for each kind
    (all by default) once torch and transformers import; the worst status."""
    argv = sys.argv[1:] if argv is None else argv
    out = argv[0] if argv else default_out
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"needs torch and transformers: {e}", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    return max(export_one(kind, out) or 0 for kind in (argv[1:] or kinds))


def main(argv=None) -> int:
    return run_exports(argv, "/tmp/lamina-real-exports", export,
                       ("gpt2", "llama"))


if __name__ == "__main__":
    sys.exit(main())
