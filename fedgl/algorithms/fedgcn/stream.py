"""FedGCN's plaintext pre-training exchange, streamed in blocks of global ids.

A products-sized federation uploads gigabytes of partial sums (appendix F: ``Σ_k |Ñ(V_k)| d``
values). Collecting every upload before summing would hold all of it on the server at once, so
the exchange runs block by block over the global id space ``[i B, (i + 1) B)``
(``B = pretrain_block_rows``, a configuration value every party knows):

1. ``announce_rows``: each client sends the ids it touches (own nodes first, then remote
   neighbours), how many leading ids it wants back, and with 2-hop its own nodes' degrees. No
   feature values.
2. For each block i: ``block_sums`` — each client uploads ``S_k[j]`` for its touched ids j in
   the block, in ascending id order; the server adds them in client order
   (``S[j] = Σ_k S_k[j]``, one dense ``B × d`` block) and answers with ``receive_block`` — each
   client's requested rows of the block in ascending id order (and with 2-hop the degrees of the
   requested remote ones). Every upload and reply is a counted message; an empty one is 0 bytes.

Each party holds at most one block's messages and one ``B × d`` block beside its own data: no
party ever holds an ``N × d`` matrix (a client's received rows are its model input,
``|V_k| × d`` or ``|V_k ∪ N(V_k)| × d``). Every row is computed by the same additions in the same
order whatever ``B`` and ``pretrain_chunk_rows`` are, so any block size gives bitwise the same
sums; the dense-equivalent bytes are the appendix formula for any ``B`` (a sparse message adds
its ``rows + 1`` offsets and two dimensions per block).

The clients advance a block cursor with each call, so the server never sends block numbers; a
restarted client has no cursor and answers ``stale``, and the server then restarts the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from fedgl.algorithms.fedgcn.sparse_sums import _compact, partial_sum_rows
from fedgl.data.csr import CSR
from fedgl.errors import RunAborted
from fedgl.federation.messages import RowPicker, SparseRows, as_dense
from fedgl.resources import release_freed_memory

DEFAULT_BLOCK_ROWS = 1 << 18


def block_bounds(i: int, block_rows: int) -> tuple[int, int]:
    """Global ids ``[lo, hi)`` of block ``i``."""
    return i * block_rows, (i + 1) * block_rows


@dataclass
class ClientStream:
    """One client's side of a streamed exchange: its rows in ascending id order and a cursor.

    ``source`` is either the incidence ``B_k diag(d̃^{-1/2})`` with rows in ascending id order
    (exact sums ``source · X_k``, computed per block) or the released rows themselves (DP:
    drawn once, sent in slices)."""

    sorted_ids: np.ndarray  # touched ids, ascending
    source: CSR | Tensor
    features: np.ndarray | CSR | None  # X_k (own, unscaled) with the incidence
    chunk_rows: int
    want_ids: np.ndarray  # requested ids, ascending
    want_pos: np.ndarray  # their positions in the request order (own first, then remote)
    num_own: int
    incoming: Tensor  # num_requested × d, filled block by block
    remote_degrees: Tensor | None  # degrees of the requested remote rows, filled likewise
    cursor: int = 0
    block: int | None = None  # the block whose upload was sent last
    filled: int = 0
    degrees_filled: int = 0
    done: bool = field(default=False)
    pieces: dict[int, CSR] | None = None  # the incidence cut by block, see split
    piece_rows: int = 0

    def split_by_block(self, block_rows: int) -> None:
        """Cut a sparse ``source`` into one piece per block (its rows of that block's ids), so
        that each piece is freed once uploaded: the incidence shrinks block by block while
        the received rows fill ``incoming`` (which the caller allocates without touching its
        pages). Uploads stay bitwise the same (each row is computed on its own)."""
        if not isinstance(self.source, CSR):
            return
        n = len(self.sorted_ids)
        blocks = int(self.sorted_ids[-1]) // block_rows + 1 if n else 0
        cuts = np.searchsorted(self.sorted_ids, np.arange(blocks + 1, dtype=np.int64) * block_rows)
        self.pieces = {i: self.source.row_slice(int(cuts[i]), int(cuts[i + 1]))
                       for i in range(blocks)}
        self.pieces[-1] = self.source.row_slice(0, 0)  # the empty piece of every later block
        self.piece_rows, self.source = block_rows, None

    def upload(self, block_rows: int) -> Tensor | SparseRows:
        """The next block's rows ``S_k[j]``, ascending j; advances the cursor."""
        self.block, self.cursor = self.cursor, self.cursor + 1
        if self.done:
            return self._empty()
        if self.pieces is not None and block_rows == self.piece_rows:
            piece = self.pieces.pop(self.block, None)
            return partial_sum_rows(self.features, self.pieces[-1] if piece is None else piece,
                                    self.chunk_rows)
        lo, hi = block_bounds(self.block, block_rows)
        a, b = np.searchsorted(self.sorted_ids, [lo, hi])
        if isinstance(self.source, Tensor):
            return _compact(self.source[a:b].numpy())
        return partial_sum_rows(self.features, self.source.row_slice(a, b), self.chunk_rows)

    def download(self, block_rows: int, sums: Tensor | SparseRows,
                 degrees: Tensor | None) -> bool:
        """Place the block's requested rows; True once every requested row (and degree) has
        arrived and no touched row is left to upload."""
        if self.block is None:
            raise RunAborted("the server sent pre-training rows before asking for this block's "
                             "upload; the protocol is out of order")
        if self.done:
            self._expect(sums, 0, "rows")
            return True
        lo, hi = block_bounds(self.block, block_rows)
        a, b = np.searchsorted(self.want_ids, [lo, hi])
        self._expect(sums, b - a, "rows")
        if b > a:
            at = torch.from_numpy(self.want_pos[a:b])
            if isinstance(sums, SparseRows):   # written where they go, without a dense copy
                sums.put_rows(self.incoming, at)
            else:
                self.incoming[at] = sums.to(self.incoming.dtype)
        self.filled += b - a
        if self.remote_degrees is not None:
            remote = self.want_ids[a:b][self.want_pos[a:b] >= self.num_own]
            self._expect(degrees, len(remote), "degrees")
            if len(remote):
                # requested remote ids are sorted in the request order too: a contiguous run
                end = self.degrees_filled + len(remote)
                self.remote_degrees[self.degrees_filled:end] = degrees
                self.degrees_filled = end
        last_touched = int(self.sorted_ids[-1]) if len(self.sorted_ids) else -1
        self.done = self.filled == len(self.want_ids) and hi > last_touched
        return self.done

    def release(self) -> None:
        """Drop everything but the cursor once done (the received rows now belong to the
        client's model input): a finished stream reads none of its ids again (an upload is
        empty, a reply must be empty)."""
        self.source = self.features = self.pieces = None
        self.sorted_ids = self.want_ids = self.want_pos = np.empty(0, dtype=np.int64)
        # the incidence pieces were heap-sized: freed in the middle of the heap they would
        # stay resident under the received rows
        release_freed_memory()
        self.incoming = torch.empty((0, self.incoming.shape[1]), dtype=self.incoming.dtype)
        self.remote_degrees = None if self.remote_degrees is None else torch.empty(0, dtype=torch.long)

    def _expect(self, x: Tensor | SparseRows | None, n: int, what: str) -> None:
        rows = 0 if x is None else int(x.shape[0])
        width = self.incoming.shape[1] if what == "rows" else None
        bad_width = (x is not None and width is not None and rows and int(x.shape[1]) != width)
        if rows != n or bad_width:
            raise RunAborted(f"the server sent {rows} pre-training {what} for a block in which "
                             f"this client asked for {n}; the reply does not match the request")

    def _empty(self) -> Tensor:
        return torch.zeros((0, self.incoming.shape[1]), dtype=self.incoming.dtype)


class ServerBlocks:
    """The server's side: who touches and wants which ids, and the per-block sums and replies.

    Built from the clients' ``announce_rows`` messages: ``ids`` (own first), ``num_requested``
    and, when remote degrees are exchanged, ``degrees`` (of the leading own ids)."""

    def __init__(self, announced: dict[int, dict], block_rows: int,
                 send_degrees: bool = True) -> None:
        self.block_rows = block_rows
        self.clients = sorted(announced)
        self.touched: dict[int, np.ndarray] = {}
        self.wanted: dict[int, np.ndarray] = {}
        self.remote_wanted: dict[int, np.ndarray] = {}
        top = -1
        for k in self.clients:
            ids = announced[k]["ids"].numpy()
            n_req = int(announced[k]["num_requested"])
            self.touched[k] = np.sort(ids)
            self.wanted[k] = np.sort(ids[:n_req])
            top = max(top, int(ids.max()) if len(ids) else -1)
        self.top = top
        self.num_blocks = (top + block_rows) // block_rows if top >= 0 else 0
        self.degree: Tensor | None = None
        if send_degrees and any("degrees" in announced[k] for k in self.clients):
            self.degree = torch.zeros(top + 1, dtype=torch.long)
            for k in self.clients:
                own = announced[k]["degrees"]
                ids = announced[k]["ids"]
                self.degree[ids[:len(own)]] = own
                n_req = int(announced[k]["num_requested"])
                self.remote_wanted[k] = np.sort(ids[len(own):n_req].numpy())

    def block_ids(self, k: int, i: int) -> np.ndarray:
        """The ids client k uploads in block i, in upload order (ascending)."""
        lo, hi = block_bounds(i, self.block_rows)
        a, b = np.searchsorted(self.touched[k], [lo, hi])
        return self.touched[k][a:b]

    def replies(self, i: int, uploads: dict[int, Tensor | SparseRows]) -> dict[int, dict]:
        """Block i: add the uploads in client order, answer each client's requested rows.

        ``uploads`` is consumed: each client's rows leave the dict once added, so the block's
        uploads and its replies are not all held at once."""
        lo, hi = block_bounds(i, self.block_rows)
        first = uploads[self.clients[0]]
        dtype = (first.dtype if isinstance(first, Tensor)
                 else torch.from_numpy(np.empty(0, dtype=first.values.dtype)).dtype)
        block = torch.zeros((max(min(hi, self.top + 1) - lo, 0), int(first.shape[1])),
                            dtype=dtype)
        del first
        for k in self.clients:
            a, b = np.searchsorted(self.touched[k], [lo, hi])
            rows = uploads.pop(k)
            if int(rows.shape[0]) != b - a:
                raise RunAborted(f"client {k} uploaded {int(rows.shape[0])} pre-training rows "
                                 f"for a block in which it announced {b - a}")
            if b > a:
                block.index_add_(0, torch.from_numpy(self.touched[k][a:b] - lo),
                                 as_dense(rows).to(block.dtype))
            del rows
        out = {}
        picker = RowPicker(block)   # the block's non-zeros found once for every client's rows
        for k in self.clients:
            a, b = np.searchsorted(self.wanted[k], [lo, hi])
            reply: dict = {"sums": picker.pick(self.wanted[k][a:b] - lo)}
            if self.degree is not None:
                r = self.remote_wanted[k]
                ra, rb = np.searchsorted(r, [lo, hi])
                reply["degrees"] = self.degree[torch.from_numpy(r[ra:rb])]
            out[k] = reply
        return out
