"""Exit heads: global average pool + linear to the classes, trained by distillation (KL divergence to the model's
own softmax) on unlabeled data. Labels are never used here: ``--eval`` only judges."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Features:
    """What the full model computes on a data set: the pooled features at each cut and the final scores."""

    pooled: list[np.ndarray]  # per cut: [n, channels]
    scores: np.ndarray  # [n, classes]: the model's output


def with_outputs(model: Path, dst: Path, names: list[str]) -> Path:
    """``model`` with ``names`` added as graph outputs (the cut tensors), written to ``dst``."""
    import onnx

    from edgeopt.runtime.reference import with_outputs as tapped

    onnx.save(tapped(onnx.load(str(model)), names, typed=False), str(dst))
    return dst


def pool(array: np.ndarray) -> np.ndarray:
    """Global average over every axis after the channel axis: [N, C, ...] -> [N, C]."""
    return array.reshape(array.shape[0], array.shape[1], -1).mean(axis=2)


def compute(tapped: Path, dataset, cuts: list[str], output: str, threads=None, keep_raw: int = 0):
    """The :class:`Features` of ``dataset`` on ``tapped`` (the model with the cuts as outputs), and the raw cut
    tensors of its first ``keep_raw`` samples (the stage models' check inputs)."""
    from edgeopt.runtime.reference import session

    sess = session(tapped, threads=threads)
    pooled: list[list[np.ndarray]] = [[] for _ in cuts]
    scores, raw = [], [[] for _ in cuts]
    for i in range(len(dataset)):
        outs = sess.run([*cuts, output], dataset.feed(i))
        for k, arr in enumerate(outs[:-1]):
            pooled[k].append(pool(arr))
            if i < keep_raw:
                raw[k].append(arr)
        scores.append(outs[-1].reshape(outs[-1].shape[0], -1))
    feats = Features([np.concatenate(p) for p in pooled], np.concatenate(scores))
    return feats, [np.concatenate(r) if r else None for r in raw]


def as_probabilities(scores: np.ndarray) -> tuple[np.ndarray, bool]:
    """(probabilities, whether the scores already were): rows that are non-negative and sum to 1 are taken as
    they are; rows of independent activations in [0, 1] (sigmoids: CREPE's pitch bins) are divided by their sums,
    since a softmax of values in [0, 1] is nearly flat and would teach the heads nothing; anything else (logits)
    goes through a softmax. Probabilities or activations: the exits then answer with probabilities."""
    s = scores.astype(np.float64)
    if (s >= -1e-6).all() and np.allclose(s.sum(axis=1), 1.0, atol=1e-3):
        return s, True
    if (s >= -1e-6).all() and (s <= 1 + 1e-6).all() and (s.sum(axis=1) > 0).all():
        return s / s.sum(axis=1, keepdims=True), True
    return softmax(s), False


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def train_head(pooled: np.ndarray, teacher: np.ndarray, epochs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(weight [classes, channels], bias [classes]) of a linear head on ``pooled``, trained for at most ``epochs``
    full-batch Adam steps by KL(teacher || softmax(head)) on 80 % of the samples; the step with the lowest KL on the
    other 20 % is kept (a head fitted too long on a few hundred samples grows over-confident, which lets samples
    leave on wrong answers). The features are standardised for the training and that folded into the weights."""
    from edgeopt.deps import require

    torch = require("torch", "training early-exit heads")
    torch.manual_seed(seed)
    mean, std = pooled.mean(axis=0), pooled.std(axis=0) + 1e-6
    x = torch.tensor((pooled - mean) / std, dtype=torch.float32)
    t = torch.tensor(teacher, dtype=torch.float32)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_fit = max(1, int(len(x) * 0.8)) if len(x) >= 10 else len(x)
    fit, val = order[:n_fit], order[n_fit:] if n_fit < len(x) else order
    linear = torch.nn.Linear(x.shape[1], t.shape[1])
    opt = torch.optim.Adam(linear.parameters(), lr=0.02, weight_decay=1e-3)

    def kl(idx):
        return torch.nn.functional.kl_div(torch.log_softmax(linear(x[idx]), dim=1), t[idx], reduction="batchmean")

    best, state = float("inf"), None
    for _ in range(epochs):
        opt.zero_grad()
        kl(fit).backward()
        opt.step()
        with torch.no_grad():
            v = float(kl(val))
        if v < best:
            best, state = v, (linear.weight.detach().clone(), linear.bias.detach().clone())
    w = state[0].numpy().astype(np.float64) / std
    b = state[1].numpy().astype(np.float64) - w @ mean
    return w.astype(np.float32), b.astype(np.float32)


def head_logits(pooled: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return pooled @ weight.T + bias
