"""Tables and plots made from results (never from printed output)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def plot_label_histogram(label_counts: list[list[int]], path: str | Path, *,
                         title: str = "") -> Path:
    """Stacked bar chart of each client's label counts (FedGCN paper, Figure 3 style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    counts = np.asarray(label_counts)
    clients, classes = counts.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * clients + 2), 3.5))
    bottom = np.zeros(clients)
    cmap = plt.get_cmap("tab10" if classes <= 10 else "tab20")
    for c in range(classes):
        ax.bar(np.arange(clients), counts[:, c], bottom=bottom, color=cmap(c % cmap.N),
               label=f"class {c}")
        bottom += counts[:, c]
    ax.set_xlabel("client")
    ax.set_ylabel("nodes")
    ax.set_xticks(np.arange(clients))
    ax.set_title(title)
    ax.legend(fontsize="small", ncol=1, bbox_to_anchor=(1.02, 1), loc="upper left")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=out.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, out)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
    return out
