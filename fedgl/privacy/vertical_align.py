"""Vertical alignment (GLASU): parties holding columns about overlapping entities find the
common ones by private set intersection (:mod:`fedgl.privacy.psi`), align their rows and keep
only the intersection.

Each party ``j`` ingests its tables (``fedgl ingest --vertical``,
:func:`fedgl.data.own.ingest.vertical_arrays`: an id column, its own feature columns, at the
label holder a label and a split column, and its own edges; ids as keyed pseudonyms only). After
the PSI every party knows which of its ids are common and their common order; it then holds, as
a :class:`~fedgl.data.vertical.VerticalClientData`, row ``r`` = the ``r``-th common entity, its
own columns (global column ids ``offset_j + 0..d_j-1``, the offsets from the parties' widths in
client order), its own edges whose both endpoints are common (both directions, sorted by
destination then source) and, at the label holder, the labels and split masks of those rows.
No party learns an id outside the intersection (the PSI's guarantee); the edge tables never
leave their party.

:func:`align_in_process` runs every party and the server in one process (a trial; the PSI's
messages still go through a :class:`~fedgl.federation.runtime.LocalRuntime` and its ledger).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedgl.data.graph import GraphData, clean_edge_index
from fedgl.data.own.secret import as_keys
from fedgl.data.vertical import VerticalClientData
from fedgl.errors import DataError
from fedgl.federation.ledger import Ledger
from fedgl.federation.runtime import LocalRuntime
from fedgl.privacy.psi import PsiParty, run_psi


def aligned_shard(k: int, arrays: dict[str, np.ndarray], common: np.ndarray, offset: int,
                  num_classes: int) -> VerticalClientData:
    """Party ``k``'s shard over the common rows (``common``: positions of its own pseudonyms,
    in the common order); ``arrays`` as :func:`fedgl.data.own.ingest.vertical_arrays` makes
    them."""
    n = len(common)
    keys = as_keys(arrays["own"])[common]
    order = np.argsort(keys)
    ends = as_keys(arrays["ends"])
    at = np.searchsorted(keys[order], ends).clip(max=max(n - 1, 0))
    found = keys[order][at] == ends if n else np.zeros(len(ends), dtype=bool)
    row = np.where(found, order[at], -1)       # endpoint -> common row (-1: not common)
    u, v = row[arrays["edges"][0]], row[arrays["edges"][1]]
    keep = (u >= 0) & (v >= 0)
    e = torch.from_numpy(np.stack([u[keep], v[keep]]).astype(np.int64))
    edge_index = clean_edge_index(e, n) if e.size(1) else torch.zeros((2, 0), dtype=torch.int64)
    d = arrays["x"].shape[1]
    idx = torch.from_numpy(common)
    labels = "y" in arrays

    def take(name: str) -> torch.Tensor | None:
        return torch.from_numpy(arrays[name])[idx] if labels else None

    return VerticalClientData(
        client_id=k, num_nodes=n, columns=torch.arange(offset, offset + d, dtype=torch.int64),
        x=torch.from_numpy(arrays["x"])[idx], edge_index=edge_index, y=take("y"),
        train_mask=take("train_mask"), val_mask=take("val_mask"), test_mask=take("test_mask"),
        num_classes=num_classes)


def align_in_process(parties: list[tuple[dict[str, Any], dict[str, np.ndarray]]],
                     common: dict[int, np.ndarray] | None = None
                     ) -> tuple[list[VerticalClientData], dict[str, Any]]:
    """Every party's aligned shard (client order) from its vertical ingest ``(meta, arrays)``
    and the PSI's figures (common entities, set sizes, the ledger's set-up bytes and
    messages). The parties must agree on the secret (by its fingerprint) and the class list.
    ``common``, if given, receives each party's positions of its own pseudonyms in the common
    order (row ``r`` of every shard is entity ``own[common[k][r]]`` of party ``k``)."""
    parties = sorted(parties, key=lambda p: int(p[0]["client_id"]))
    ids = [int(m["client_id"]) for m, _ in parties]
    if ids != list(range(len(parties))):
        raise DataError(f"the vertical parties' client ids are {ids}; give each one of "
                        f"0..{len(parties) - 1}")
    if len({m["secret_check"] for m, _ in parties}) != 1:
        raise DataError("the parties' federation secrets differ; ingest again with the one "
                        "shared secret")
    holders = [k for k, (m, _) in enumerate(parties) if m["classes"] is not None]
    if not holders:
        raise DataError("no party holds labels; give the label holder's --label-column")
    classes = parties[holders[0]][0]["classes"]
    if any(parties[k][0]["classes"] != classes for k in holders):
        raise DataError("the label holders' class lists differ; give every one the same "
                        "--classes")
    roles = {k: PsiParty(k, a["own"], len(parties)) for k, (_, a) in enumerate(parties)}
    runtime = LocalRuntime(roles, Ledger())
    figures = run_psi(runtime, list(roles))
    if figures["common"] == 0:
        raise DataError("the parties have no entity in common; check they used one secret "
                        "and the same kind of ids")
    offsets = np.concatenate([[0], np.cumsum([a["x"].shape[1] for _, a in parties])]).tolist()
    shards = [aligned_shard(k, a, roles[k].common, int(offsets[k]), len(classes))
              for k, (_, a) in enumerate(parties)]
    if common is not None:
        common.update({k: np.asarray(roles[k].common) for k in roles})
    summary = runtime.ledger.summary()
    figures.update(bytes=summary["bytes"]["setup"], messages=summary["messages"]["setup"],
                   wire_bytes={d: runtime.ledger.wire_bytes("setup", d) for d in ("up", "down")},
                   label_holders=holders)
    return shards, figures


@dataclass(eq=False)
class AlignedGraph(GraphData):
    """The experimenter's view of a local vertical trial: the parties' columns side by side,
    the label holder's labels, the union of their edges, and the aligned parts themselves,
    which a GLASU run over this graph uses as they are (no split of its own)."""

    vertical_parts: list[VerticalClientData] | None = None
    provenance: dict[str, Any] | None = None
    #: the label holders' class names (their ingests agreed on them)
    class_names: list[str] | None = None


def aligned_graph(shards: list[VerticalClientData], name: str,
                  provenance: dict[str, Any]) -> AlignedGraph:
    holder = next(s for s in shards if s.has_labels)
    n = holder.num_nodes
    x = torch.cat([s.x for s in sorted(shards, key=lambda s: int(s.columns[0]) if
                                       s.columns.numel() else 0)], dim=1)
    edges = torch.cat([s.edge_index for s in shards], dim=1)
    return AlignedGraph(f"own:{name}", x, holder.y, clean_edge_index(edges, n),
                        holder.train_mask, holder.val_mask, holder.test_mask, holder.num_classes,
                        vertical_parts=shards, provenance=provenance)
