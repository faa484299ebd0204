#!/usr/bin/env python3
"""Export a tiny causal LM that computes its own loss, as a Transformers
model called with ``labels=`` does, and train it in PyTorch for reference.

    PYTHONPATH=python python3 python/lamina/export_own_loss.py [OUTDIR]

Needs ``torch`` only. The model (seed 0) is a 2-layer GPT in plain
``torch.nn`` (tied embedding and head, pre-norm blocks, causal attention,
GELU MLP, vocab 64, hidden 32); its forward takes ``input_ids`` and returns
``(loss, logits)`` with the loss Transformers' causal LMs compute: the
labels are the input ids, shifted inside the model, and
``F.cross_entropy(logits[:, :-1].view(-1, V), labels[:, 1:].view(-1),
ignore_index=-100)``. It writes

  own_loss_torchscript_opset17.onnx         torch.onnx.export(dynamo=False),
                                            opset 17: the loss is a
                                            SoftmaxCrossEntropyLoss node
  own_loss_labels_torchscript_opset17.onnx  the same model taking a separate
                                            ``labels`` input (what
                                            ``model(input_ids, labels=...)``
                                            exports to)
  own-loss-training.json                    PyTorch training the first on the
                                            batches ``run --data --seed 1``
                                            draws (the SplitMix64 sampler),
                                            SGD and AdamW, every step's loss

in hf-*-training.json's format (test/e2e/Inputs/hf_reference.py reads it).
The files are committed in test/Inputs/models/ and test/Inputs/reference/
(test/e2e/own-loss-training.test).
"""

from __future__ import annotations

import json
import os
import sys

from lamina.testing.sampler import SplitMix64, windows

VOCAB, HIDDEN, HEADS, LAYERS, POSITIONS = 64, 32, 4, 2, 64
BATCH, SEQ, SEED = 4, 16, 1
RUNS = {"sgd": dict(lr=0.1, steps=10), "adamw": dict(lr=1e-2, steps=10)}


def build(with_labels: bool):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
            self.qkv, self.proj = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)
            self.fc, self.out = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (y.view(b, t, HEADS, c // HEADS).transpose(1, 2)
                       for y in self.qkv(self.ln1(x)).split(c, dim=2))
            att = (q @ k.transpose(-1, -2)) / (c // HEADS) ** 0.5
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~causal, float("-inf")).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class CausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(POSITIONS, HIDDEN)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln = nn.LayerNorm(HIDDEN)
            self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
            self.head.weight = self.wte.weight
            for p in self.parameters():  # GPT-2's initialisation
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def logits(self, input_ids):
            x = self.wte(input_ids) + self.wpe(torch.arange(input_ids.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

        def loss(self, logits, labels):
            # Transformers' causal-LM loss: predict token t + 1 from t.
            shift_logits = logits[:, :-1, :].contiguous()
            shift_labels = labels[:, 1:].contiguous()
            return F.cross_entropy(shift_logits.view(-1, VOCAB),
                                   shift_labels.view(-1), ignore_index=-100)

    class OwnLoss(CausalLM):
        def forward(self, input_ids):
            logits = self.logits(input_ids)
            return self.loss(logits, input_ids), logits

    class OwnLossLabels(CausalLM):
        def forward(self, input_ids, labels):
            logits = self.logits(input_ids)
            return self.loss(logits, labels), logits

    torch.manual_seed(0)
    return (OwnLossLabels if with_labels else OwnLoss)()


def export(model, path: str, with_labels: bool) -> None:
    import torch

    ids = torch.zeros(BATCH, SEQ, dtype=torch.long)
    names = ["input_ids", "labels"] if with_labels else ["input_ids"]
    dims = {n: {0: "batch", 1: "seq"} for n in names}
    torch.onnx.export(model, (ids, ids) if with_labels else (ids,), path,
                      dynamo=False, opset_version=17, input_names=names,
                      output_names=["loss", "logits"], dynamic_axes=dims)


def corpus(n: int = 4096) -> list[int]:
    """A learnable token stream: a repeating motif with a slow drift."""
    return [(i * 7 + (i // 13) * 5) % VOCAB for i in range(n)]


def train_losses(tokens, optimizer: str, lr: float, steps: int) -> list[float]:
    import torch

    model = build(with_labels=False)
    opt = (torch.optim.SGD(model.parameters(), lr=lr) if optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=lr))
    rng, losses = SplitMix64(SEED), []
    for _ in range(steps):
        loss, _ = model(torch.from_numpy(windows(tokens, BATCH, SEQ, rng)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = argv[0] if argv else "/tmp/lamina-own-loss"
    os.makedirs(out, exist_ok=True)
    export(build(False), os.path.join(out, "own_loss_torchscript_opset17.onnx"), False)
    export(build(True), os.path.join(out, "own_loss_labels_torchscript_opset17.onnx"), True)
    tokens = corpus()
    runs = {name: dict(run, losses=train_losses(tokens, name, run["lr"], run["steps"]))
            for name, run in RUNS.items()}
    with open(os.path.join(out, "own-loss-training.json"), "w") as f:
        import torch
        json.dump({"models": ["own_loss_torchscript_opset17.onnx"],
                   "torch": torch.__version__, "batch": BATCH, "seq": SEQ,
                   "seed": SEED, "vocab": VOCAB, "runs": runs, "tokens": tokens}, f)
    for name, run in runs.items():
        print(f"{name}: {run['losses'][0]:.6f} -> {run['losses'][-1]:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
