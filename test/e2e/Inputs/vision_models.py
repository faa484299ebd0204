"""Models, data and checks for vision-training.test: a small CNN (Conv,
BatchNorm in training mode, ReLU, MaxPool, global average pool, Linear) and
a tiny ViT (a stride = kernel Conv patch embedding, a class token, one
pre-norm attention block), both plain torch.nn modules that compute their
own cross-entropy, exported by torch.onnx.export and trained by PyTorch on
the batches `run --data-dir --seed 3` draws. Prints "ok" or the reason
it is not.

  generate DIR              (by hand, needs torch) DIR/{cnn,vit}.onnx and
                            DIR/vision-training.json: the images, labels
                            and PyTorch's SGD losses for each model
  data JSON DIR             DIR/pixel_values.npy (f32), DIR/labels.npy (i64)
  losses JSON MODEL LOG     every logged loss is PyTorch's within 1e-5
"""
import json
import os
import sys

import numpy as np

from lamina.testing.sampler import epoch_order
from named_data import check_losses  # this folder: the same check

BATCH, N, CLASSES, SIZE = 4, 12, 3, 8
SEED, STEPS, LR = 3, 8, 0.1


def models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(6)
            self.pool = nn.MaxPool2d(2)
            self.conv2 = nn.Conv2d(6, 8, 3, stride=1, padding=1, groups=2)
            self.bn2 = nn.BatchNorm2d(8)
            self.fc = nn.Linear(8, CLASSES)

        def forward(self, pixel_values, labels):
            h = self.pool(F.relu(self.bn1(self.conv1(pixel_values))))
            h = F.relu(self.bn2(self.conv2(h)))
            h = F.adaptive_avg_pool2d(h, 1).flatten(1)
            logits = self.fc(h)
            return F.cross_entropy(logits, labels), logits

    class ViT(nn.Module):
        def __init__(self, dim=16, heads=2, patch=4):
            super().__init__()
            self.heads = heads
            self.patch = nn.Conv2d(3, dim, patch, stride=patch)
            patches = (SIZE // patch) ** 2
            self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, patches + 1, dim) * 0.02)
            self.ln1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.ln2 = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, 2 * dim)
            self.fc2 = nn.Linear(2 * dim, dim)
            self.ln = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, CLASSES)

        def forward(self, pixel_values, labels):
            x = self.patch(pixel_values).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
            x = x + self.pos
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
            split = lambda t: t.view(b, s, self.heads, -1).transpose(1, 2)
            q, k, v = split(q), split(k), split(v)
            a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1)
            x = x + self.proj((a @ v).transpose(1, 2).reshape(b, s, d))
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
            logits = self.head(self.ln(x)[:, 0])
            return F.cross_entropy(logits, labels), logits

    return {"cnn": CNN, "vit": ViT}


def generate(out):
    import torch

    os.makedirs(out, exist_ok=True)
    rs = np.random.RandomState(11)
    x = rs.randn(N, 3, SIZE, SIZE).astype(np.float32)
    y = rs.randint(0, CLASSES, N)
    ref = {"pixel_values": x.tolist(), "labels": y.tolist(), "seed": SEED,
           "lr": LR, "steps": STEPS, "torch": torch.__version__}
    for name, cls in models().items():
        torch.manual_seed(5)
        model = cls()
        model.train()
        example = (torch.tensor(x[:BATCH]), torch.tensor(y[:BATCH]))
        # TRAINING keeps BatchNormalization in training mode (batch
        # statistics) and unfused; the exporter's default (eval) would fold
        # it into the convolution.
        torch.onnx.export(model, example, os.path.join(out, name + ".onnx"),
                          dynamo=False, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False,
                          input_names=["pixel_values", "labels"],
                          output_names=["loss", "logits"])
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        order = epoch_order(SEED, N)
        losses = []
        for _ in range(STEPS):
            idx = [next(order) for _ in range(BATCH)]
            loss, _ = model(torch.tensor(x[idx]), torch.tensor(y[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        ref[name] = losses
    with open(os.path.join(out, "vision-training.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


def main():
    what = sys.argv[1]
    if what == "generate":
        return generate(sys.argv[2])
    ref = json.load(open(sys.argv[2]))
    if what == "data":
        os.makedirs(sys.argv[3], exist_ok=True)
        np.save(os.path.join(sys.argv[3], "pixel_values.npy"),
                np.asarray(ref["pixel_values"], np.float32))
        np.save(os.path.join(sys.argv[3], "labels.npy"),
                np.asarray(ref["labels"], np.int64))
    elif what == "losses":
        check_losses(ref[sys.argv[3]], sys.argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
