"""The batches a compiled `run` draws for each task, drawn here as
docs/training.md ("Training data") states them, and PyTorch's training of
the same model on them.

  causal-lm             run --data FILE (recipe causal-lm): per row a
                        window of SEQ tokens at below(N - SEQ)
  masked-lm             --recipe masked-lm: Transformers' collator (15%
                        chosen; 80% mask token, 10% random id, 10% kept)
  seq2seq               --recipe seq2seq: SEQ encoder tokens, the TGT that
                        follow as labels, decoder inputs shifted right
  image-classification  --data-dir: pixel_values.npy and labels.npy,
                        shuffled epochs (Fisher-Yates per epoch)

Every draw comes from lamina.testing.sampler's SplitMix64 seeded with
--seed, the Python twin of the runtime's."""

from __future__ import annotations

import os
import struct

import numpy as np

from lamina.testing.sampler import SplitMix64, epoch_order, windows

from .models import BATCH, CHANNELS, CLASSES, IMAGE, SEQ, TGT, V

IGNORE = -100
EXAMPLES = 24  # images in the classification data set


def corpus(n: int = 4096) -> list[int]:
    """A learnable token stream: a repeating motif with a slow drift
    (python/lamina/export_real_models.py's)."""
    return [(i * 7 + (i // 13) * 5) % V for i in range(n)]


def write(task, out):
    """The data files of `task` under `out`; returns the `run` flags that
    read them."""
    if task == "image-classification":
        rs = np.random.RandomState(5)
        d = os.path.join(out, "data")
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "pixel_values.npy"),
                rs.randn(EXAMPLES, CHANNELS, IMAGE, IMAGE).astype(np.float32))
        np.save(os.path.join(d, "labels.npy"),
                rs.randint(0, CLASSES, EXAMPLES).astype(np.int64))
        return ["--data-dir", d, "--recipe", "classification"]
    path = os.path.join(out, "data.bin")
    tokens = corpus()
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
    return ["--data", path]


def recipe_flags(task, spec, own):
    flags = {"masked-lm": ["--recipe", "masked-lm", "--mask-token",
                           str(spec.mask_token), "--mask-rate", "0.15"],
             "seq2seq": ["--recipe", "seq2seq", "--decoder-start-token",
                         str(spec.decoder_start)]}.get(task, [])
    if own and task != "image-classification":
        flags += ["--vocab", str(V)]
    return flags


def batches(task, spec, out, seed, steps, rows=BATCH):
    """The `steps` batches `run --seed SEED` trains on, as dicts of int64
    (float for pixels) arrays by input name, labels included."""
    rng = SplitMix64(seed)
    tokens = np.asarray(corpus(), np.int64)
    n = len(tokens)
    if task == "image-classification":
        d = os.path.join(out, "data")
        px, lab = (np.load(os.path.join(d, f)) for f in
                   ("pixel_values.npy", "labels.npy"))
        order = epoch_order(seed, len(lab))
        for _ in range(steps):
            idx = [next(order) for _ in range(rows)]
            yield {"pixel_values": px[idx], "labels": lab[idx]}
        return
    for _ in range(steps):
        if task == "causal-lm":
            ids = windows(tokens, rows, SEQ, rng)
            yield {"input_ids": ids, "labels": ids}
        elif task == "masked-lm":
            ids = np.zeros((rows, SEQ), np.int64)
            labels = np.full((rows, SEQ), IGNORE, np.int64)
            for b in range(rows):
                start = rng.below(n - SEQ + 1)
                for j in range(SEQ):
                    t = tokens[start + j]
                    if rng.uniform() < 0.15:
                        labels[b, j] = t
                        r = rng.uniform()
                        t = (spec.mask_token if r < 0.8 else
                             rng.below(V) if r < 0.9 else t)
                    ids[b, j] = t
            yield {"input_ids": ids, "labels": labels}
        else:  # seq2seq
            starts = [rng.below(n - SEQ - TGT + 1) for _ in range(rows)]
            ids = np.stack([tokens[s:s + SEQ] for s in starts])
            labels = np.stack([tokens[s + SEQ:s + SEQ + TGT] for s in starts])
            dec = np.concatenate(
                [np.full((rows, 1), spec.decoder_start), labels[:, :-1]], 1)
            yield {"input_ids": ids, "decoder_input_ids": dec,
                   "labels": labels}


def train(model, task, spec, out, seed, steps, lr, micro=1):
    """PyTorch's SGD losses training `model` (build(..., own=True)) on the
    batches above. The model's own loss is Transformers' (labels=); for a
    causal LM that is the cross-entropy of position t against token t + 1,
    what `--loss causal-lm` computes. With micro > 1 each batch runs as
    `micro` chunks whose losses are weighted by their counted labels, as a
    pipeline's micro-batches are (only batch norm, whose statistics are
    the chunk's, tells the two apart)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr)
    losses = []
    for batch in batches(task, spec, out, seed, steps):
        args = [torch.from_numpy(np.ascontiguousarray(batch[n]))
                for n in model.input_names]
        if micro > 1:
            chunks = list(zip(*(a.chunk(micro) for a in args)))
            counts = [(c[-1] != IGNORE).sum() for c in chunks]
            loss = sum(model(*c) * n for c, n in zip(chunks, counts)) / sum(counts)
        else:
            loss = model(*args)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
