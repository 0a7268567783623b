"""Vertical alignment (GLASU): parties holding columns about overlapping entities find the
common ones by private set intersection (:mod:`fedgl.privacy.psi`), align their rows and keep
only the intersection.

Each party ``j`` has a nodes table (an id column, its own feature columns; the label holder also
a label and a split column) and its own edges table (pairs of ids). After the PSI every party
knows which of its ids are common and their common order; it then holds, as a
:class:`~fedgl.data.vertical.VerticalClientData`, row ``r`` = the ``r``-th common entity, its
own columns (global column ids ``offset_j + 0..d_j-1``, the offsets from the parties' widths in
client order), its own edges whose both endpoints are common (both directions, sorted by
destination then source) and, at the label holder, the labels and split masks of those rows.
No party learns an id outside the intersection (the PSI's guarantee); the edge tables never
leave their party.

:func:`align_in_process` runs every party and the server in one process (a trial; the PSI's
messages still go through a :class:`~fedgl.federation.runtime.LocalRuntime` and its ledger).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedgl.data.graph import clean_edge_index
from fedgl.data.own.secret import pseudonyms
from fedgl.data.vertical import VerticalClientData
from fedgl.errors import DataError
from fedgl.federation.ledger import Ledger
from fedgl.federation.runtime import LocalRuntime
from fedgl.privacy.psi import PsiParty, run_psi


def aligned_shard(k: int, tables: dict[str, Any], common: np.ndarray, offset: int,
                  num_classes: int) -> VerticalClientData:
    """Party ``k``'s shard over the common rows (``common``: positions of its ids, in the
    common order)."""
    n = len(common)
    row = {tables["ids"][int(i)]: r for r, i in enumerate(common)}
    pairs = [(row[a], row[b]) for a, b in tables["edges"] if a in row and b in row]
    e = torch.tensor(pairs, dtype=torch.int64).T if pairs else torch.zeros((2, 0), dtype=torch.int64)
    edge_index = clean_edge_index(e, n) if pairs else e
    d = tables["x"].shape[1]
    labels = tables["y"] is not None
    idx = torch.from_numpy(common)
    return VerticalClientData(
        client_id=k, num_nodes=n, columns=torch.arange(offset, offset + d, dtype=torch.int64),
        x=torch.from_numpy(tables["x"])[idx], edge_index=edge_index,
        y=torch.from_numpy(tables["y"])[idx] if labels else None,
        train_mask=torch.from_numpy(tables["masks"]["train"])[idx] if labels else None,
        val_mask=torch.from_numpy(tables["masks"]["val"])[idx] if labels else None,
        test_mask=torch.from_numpy(tables["masks"]["test"])[idx] if labels else None,
        num_classes=num_classes)


def align_in_process(parties: list[dict[str, Any]], secret: bytes
                     ) -> tuple[list[VerticalClientData], dict[str, Any]]:
    """Every party's aligned shard (client order) and the PSI's figures (common entities, set
    sizes, the ledger's set-up bytes and messages)."""
    holders = [k for k, t in enumerate(parties) if t["y"] is not None]
    if not holders:
        raise DataError("no party holds labels; give the label holder's --label-column")
    num_classes = len(parties[holders[0]]["classes"])
    if any(parties[k]["classes"] != parties[holders[0]]["classes"] for k in holders):
        raise DataError("the label holders' class lists differ; give every one the same "
                        "--classes")
    roles = {k: PsiParty(k, pseudonyms(secret, t["ids"]), len(parties))
             for k, t in enumerate(parties)}
    runtime = LocalRuntime(roles, Ledger())
    figures = run_psi(runtime, list(roles))
    if figures["common"] == 0:
        raise DataError("the parties have no entity in common; check they used one secret "
                        "and the same kind of ids")
    offsets = np.concatenate([[0], np.cumsum([t["x"].shape[1] for t in parties])]).tolist()
    shards = [aligned_shard(k, t, roles[k].common, int(offsets[k]), num_classes)
              for k, t in enumerate(parties)]
    summary = runtime.ledger.summary()
    figures.update(bytes=summary["bytes"]["setup"], messages=summary["messages"]["setup"],
                   wire_bytes={d: runtime.ledger.wire_bytes("setup", d) for d in ("up", "down")})
    return shards, figures
