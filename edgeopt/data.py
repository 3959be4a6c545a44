"""Datasets for calibration, evaluation and checks: arrays named after the model's inputs.

An ``.npz`` holds one array per model input with samples on the first axis (plus ``labels``
for evaluation). A sample whose array has the model input's rank is taken as a batch of
one (``arr[i:i+1]``); one rank higher, ``arr[i]`` is the whole input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Dataset:
    arrays: dict[str, np.ndarray]
    labels: np.ndarray | None = None
    source: str = ""
    synthetic: bool = False
    ranks: dict[str, int] = field(default_factory=dict)  # the model input's rank, per name

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values()))) if self.arrays else 0

    def feed(self, i: int) -> dict[str, np.ndarray]:
        out = {}
        for name, arr in self.arrays.items():
            rank = self.ranks.get(name, arr.ndim - 1)
            out[name] = arr[i : i + 1] if arr.ndim == rank else arr[i]
        return out

    def feeds(self, n: int | None = None, start: int = 0) -> list[dict[str, np.ndarray]]:
        stop = len(self) if n is None else min(len(self), start + n)
        return [self.feed(i) for i in range(start, stop)]

    def split(self, fraction: float, seed: int = 0) -> tuple[Dataset, Dataset]:
        """Two disjoint parts (e.g. search / confirm), shuffled with a fixed seed."""
        idx = np.random.default_rng(seed).permutation(len(self))
        k = int(round(len(self) * fraction))
        return self.subset(idx[:k]), self.subset(idx[k:])

    def subset(self, idx) -> Dataset:
        return Dataset(
            {k: v[idx] for k, v in self.arrays.items()},
            None if self.labels is None else self.labels[idx],
            self.source,
            self.synthetic,
            dict(self.ranks),
        )
