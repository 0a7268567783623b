"""The row plan of FedGCN's secure pre-training sums: it lets the server add rows of the same
node from several clients without seeing them (masked with :mod:`fedgl.privacy.secagg` or
CKKS-encrypted with :mod:`fedgl.privacy.he`).

Row i's contributors ``C_i`` are its owner and the owners of its neighbours; its
receivers ``R_i`` are the contributors that asked for it (1-hop: the owner; 2-hop: all of them),
minus those for which ``--min-contributors`` suppresses it. The server groups rows by (C, R):
every member of a block touches every row in it, so blocks can be masked, or laid out in CKKS
slots, identically by all members, and a block goes back only to clients that asked for every
row in it (no client receives a sum it did not request). Rows touched by a single client that
only it receives are not sent at all: that client already has the full sum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor


# ---------------------------------------------------------------------- the row plan
@dataclass
class Block:
    """Rows (indices into the plan's sorted unique ids) with the same contributors and
    receivers. ``positions[k]``: each row's position in client k's list of touched rows."""

    members: list[int]
    receivers: list[int]
    rows: Tensor
    positions: dict[int, Tensor] = field(default_factory=dict)


@dataclass
class RowPlan:
    uniq: Tensor                       # sorted global ids of all touched rows
    inverse: dict[int, Tensor]         # per client: index into uniq of each touched row
    requested: dict[int, int]          # per client: how many leading touched rows it asked for
    use_own: dict[int, Tensor]         # per client, per requested row: fill with own partial sum
    blocks: list[Block]

    def blocks_of(self, k: int) -> list[int]:
        """Indices of the blocks client k contributes to, in plan order."""
        return [b for b, blk in enumerate(self.blocks) if k in blk.positions]

    def suppressed(self) -> int:
        return sum(int(u.sum()) for u in self.use_own.values())


def plan_rows(ids: Mapping[int, Tensor], requested: Mapping[int, int],
              counts: Mapping[int, Tensor] | None, min_contributors: int,
              skip_local: bool) -> RowPlan:
    """Group rows by (contributors, receivers); see the module docstring.

    ``counts[k][r]`` is how many of client k's own nodes contribute to its r-th touched row
    (needed only for ``min_contributors > 1``): a receiver's row is suppressed when it holds
    between 1 and ``min_contributors - 1`` remote nodes.
    """
    clients = sorted(ids)
    all_ids = torch.cat([ids[k] for k in clients])
    uniq, inverse = torch.unique(all_ids, return_inverse=True)
    owner = torch.cat([torch.full((len(ids[k]),), k, dtype=torch.long) for k in clients])
    position = torch.cat([torch.arange(len(ids[k])) for k in clients])
    is_req = torch.cat([torch.arange(len(ids[k])) < requested[k] for k in clients])
    receiver = is_req.clone()
    if min_contributors > 1:
        if counts is None:
            raise ValueError("min_contributors > 1 needs per-row contributor counts")
        c = torch.cat([counts[k].long() for k in clients])
        total = torch.zeros(len(uniq), dtype=torch.long).index_add_(0, inverse, c)
        remote = total[inverse] - c
        receiver &= ~((remote > 0) & (remote < min_contributors))
    n_members = torch.bincount(inverse, minlength=len(uniq))
    n_receivers = torch.bincount(inverse[receiver], minlength=len(uniq))
    local_row = (n_members == 1) if skip_local else torch.zeros(len(uniq), dtype=torch.bool)
    use_own_pair = is_req & (~receiver | local_row[inverse])
    # Set fingerprints: sums of two independent random 40-bit tags per client (exact up to a
    # ~2^-80 collision chance), plus the set sizes.
    gen = torch.Generator().manual_seed(20240601)
    top = max(clients) + 1
    tags = torch.randint(0, 2 ** 40, (2, top), generator=gen)
    zero = torch.zeros(len(uniq), dtype=torch.long)
    keys = [zero.clone().index_add_(0, inverse, tags[j][owner]) for j in range(2)]
    keys += [zero.clone().index_add_(0, inverse[receiver], tags[j][owner[receiver]])
             for j in range(2)]
    keys += [n_members, n_receivers]
    sent = (n_receivers > 0) & ~local_row
    key = torch.stack(keys, dim=1)[sent]
    rows_sent = torch.nonzero(sent).flatten()
    blocks: list[Block] = []
    if rows_sent.numel():
        _, group = torch.unique(key, dim=0, return_inverse=True)
        order = torch.argsort(group * len(uniq) + rows_sent)  # by block, then by row
        group, rows_sent = group[order], rows_sent[order]
        bounds = torch.cumsum(torch.bincount(group), 0).tolist()
        pair_key = inverse * top + owner  # sortable (row, client) key
        sort_pk, perm = torch.sort(pair_key)
        start = 0
        for end in bounds:
            rows = rows_sent[start:end]
            start = end
            lo, hi = torch.searchsorted(sort_pk, torch.stack([rows[0] * top, (rows[0] + 1) * top]))
            pairs = perm[lo:hi]
            members = sorted(owner[pairs].tolist())
            receivers = sorted(owner[pairs[receiver[pairs]]].tolist())
            blk = Block(members, receivers, rows)
            for k in members:
                idx = perm[torch.searchsorted(sort_pk, rows * top + k)]
                blk.positions[k] = position[idx]
            blocks.append(blk)
        blocks.sort(key=lambda b: (b.members, b.receivers))  # groups pairs' shared blocks
    use_own, offset = {}, 0
    for k in clients:
        n = len(ids[k])
        use_own[k] = use_own_pair[offset:offset + requested[k]].clone()
        offset += n
    split = torch.split(inverse, [len(ids[k]) for k in clients])
    return RowPlan(uniq, dict(zip(clients, split, strict=True)), dict(requested), use_own, blocks)
