"""The training program's batch sampler in Python, bit for bit
(include/lamina/Runtime/TokenData.h): references that must see the batches
a Lamina program sees (PyTorch training, onnxruntime validation losses)
draw them here."""
from __future__ import annotations

import numpy as np

_M64 = (1 << 64) - 1

# The evaluation's seed (lib/Runtime/Program/TrainCommon.h, evalSampler):
# every evaluation of `run --eval-data` draws the same windows.
EVAL_SEED = 0x5EED


class SplitMix64:
    def __init__(self, seed: int = 0):
        self.state = seed & _M64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """Uniform in [0, n): draws at or above the largest multiple of n
        are rejected (no modulo bias)."""
        limit = _M64 - _M64 % n
        while True:
            x = self.next()
            if x < limit:
                return x % n

    def uniform(self) -> float:
        """Uniform in [0, 1): the top 53 bits (the recipes' draws)."""
        return (self.next() >> 11) * 2.0 ** -53


def windows(tokens, batch: int, seq: int, rng: SplitMix64) -> np.ndarray:
    """TokenData::sample's inputs: per row, start = rng.below(N - seq),
    tokens[start : start + seq] (the causal-LM loss uses them shifted by
    one)."""
    n = len(tokens)
    out = np.empty((batch, seq), dtype=np.int64)
    for b in range(batch):
        s = rng.below(n - seq)
        out[b] = tokens[s:s + seq]
    return out


def epoch_order(seed: int, n: int):
    """The examples `run --data-dir --seed SEED` visits, one at a time
    (lib/Runtime/Program/Batches.cpp): shuffled epochs, each a Fisher-Yates
    shuffle of range(n) drawn from one SplitMix64(seed); a batch is the
    next `batch` of them, running on into the next epoch."""
    rng = SplitMix64(seed)
    while True:
        order = list(range(n))
        for i in range(n, 1, -1):
            j = rng.below(i)
            order[i - 1], order[j] = order[j], order[i - 1]
        yield from order
