"""A user's task metric for a speaker encoder, as ``--metric speaker_metric:verification`` takes it (run from bench/).

Speaker verification: every pair of utterances in the set is scored by the cosine of their embeddings; the
score is 100 − the equal error rate (%) of telling same-speaker pairs from different-speaker pairs (labels are
speaker ids). This is what a speaker encoder is for; cosine to FP32 is only a proxy of it.
"""

from __future__ import annotations

import numpy as np


def verification(outputs, labels):
    emb = np.stack([np.asarray(next(iter(o.values()))).reshape(-1) for o in outputs]).astype(np.float64)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True) + 1e-12
    labels = np.asarray(labels).reshape(-1)
    i, j = np.triu_indices(len(emb), k=1)
    scores, same = np.sum(emb[i] * emb[j], axis=1), labels[i] == labels[j]
    thresholds = np.sort(scores)
    far = np.array([np.mean(scores[~same] >= t) for t in thresholds])  # different speakers accepted
    frr = np.array([np.mean(scores[same] < t) for t in thresholds])  # same speaker rejected
    k = int(np.argmin(np.abs(far - frr)))
    return 100.0 - 100.0 * float((far[k] + frr[k]) / 2)
