"""FedGCN server: sums the clients' partial neighbour aggregates once, then runs FedAvg.

The server never holds features or edges: it learns which global ids each client touches, the
partial sums, and (2-hop) the degrees of each client's own nodes, and returns to every client
only the rows it asked for (Algorithm 1, "Server Operation").
"""

from __future__ import annotations

import torch

from fedgl.algorithms.base import FedAvgServer


class FedGCNServer(FedAvgServer):
    """FedAvg server with FedGCN's pre-training communication round."""

    def pretrain(self) -> None:
        if self.config.hops == 0:
            return
        ledger = self.runtime.ledger
        with ledger.timer("pretrain"):
            msgs = self.runtime.call("partial_sums", None, phase="pretrain")
            clients = sorted(msgs)
            ids = torch.cat([msgs[k]["ids"] for k in clients])
            uniq, inverse = torch.unique(ids, return_inverse=True)
            total = torch.zeros(len(uniq), msgs[clients[0]]["sums"].size(1),
                                dtype=msgs[clients[0]]["sums"].dtype)
            total.index_add_(0, inverse, torch.cat([msgs[k]["sums"] for k in clients]))
            rows_of, offset = {}, 0
            for k in clients:
                rows_of[k] = inverse[offset:offset + len(msgs[k]["ids"])]
                offset += len(msgs[k]["ids"])
            degree = None
            if self.config.hops >= 2:
                degree = torch.zeros(len(uniq), dtype=torch.long)
                for k in clients:
                    own = msgs[k]["degrees"]
                    degree[rows_of[k][:len(own)]] = own
            replies = {}
            for k in clients:
                want = rows_of[k][:msgs[k]["num_requested"]]
                reply = {"sums": total[want]}
                if degree is not None:
                    reply["degrees"] = degree[want[len(msgs[k]["degrees"]):]]
                replies[k] = reply
            self.runtime.call("receive_sums", replies, phase="pretrain")
