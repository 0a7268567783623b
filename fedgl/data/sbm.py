"""Stochastic block model graphs with Gaussian features (FedGCN appendix D.3 and H.3.1).

N nodes are assigned uniformly at random to C classes; an undirected edge joins two nodes of the
same class with probability α and of different classes with probability μα (eq. 4). Features
follow ``x ~ N(H y, σ² I)`` (eq. 39), with H a random C×d matrix of class means.
"""

from __future__ import annotations

import numpy as np
import torch

from fedgl.data.graph import GraphData, clean_edge_index


def stochastic_block_model(*, nodes: int = 2708, classes: int = 7, alpha: float = 0.01,
                           mu: float = 0.1, features: int = 64, noise: float = 1.0,
                           seed: int = 0) -> GraphData:
    """Draw a seeded SBM graph with a Planetoid-style split (20 per class / 500 / 1000).

    Edges are sampled block by block with a binomial count and uniform positions, so memory and
    time grow with the number of edges, not with N².
    """
    from fedgl.data.datasets import planetoid_style_split  # avoid an import cycle

    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=nodes)
    members = [np.flatnonzero(y == c) for c in range(classes)]
    src, dst = [], []
    for c in range(classes):
        for d in range(c, classes):
            a, b = members[c], members[d]
            if len(a) == 0 or len(b) == 0:
                continue
            p = alpha if c == d else mu * alpha
            pairs = len(a) * (len(a) - 1) // 2 if c == d else len(a) * len(b)
            m = rng.binomial(pairs, p) if pairs > 0 else 0
            if m == 0:
                continue
            i = rng.integers(0, len(a), size=m)
            j = rng.integers(0, len(b), size=m)
            src.append(a[i])
            dst.append(b[j])
    if src:
        ei = torch.from_numpy(np.vstack([np.concatenate(src), np.concatenate(dst)]).astype(np.int64))
    else:
        ei = torch.empty(2, 0, dtype=torch.long)
    means = rng.normal(0.0, 1.0, size=(classes, features))
    x = means[y] + noise * rng.normal(0.0, 1.0, size=(nodes, features))
    yt = torch.from_numpy(y.astype(np.int64))
    train, val, test = planetoid_style_split(yt, classes, seed=seed)
    return GraphData(name="sbm", x=torch.from_numpy(x.astype(np.float32)), y=yt,
                     edge_index=clean_edge_index(ei, nodes), train_mask=train, val_mask=val,
                     test_mask=test, num_classes=classes)
