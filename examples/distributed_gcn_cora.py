"""Distributed GCN on Cora through the Python API: every boundary node's features and hidden
states exchanged through the server at every step (exact full-graph GCN forward).
Run: FEDGL_DATA=../shared/data python examples/distributed_gcn_cora.py"""

from __future__ import annotations

import fedgl


def main(**overrides: object) -> fedgl.RunResult:
    config = {"algorithm": "distributed-gcn", "dataset": "cora", "clients": 10, "rounds": 50,
              "eval_every": 10, "progress": False, **overrides}
    result = fedgl.run(config)
    print(f"Distributed GCN: test acc {result.mean('test_acc'):.4f}, "
          f"training {result.mean('train_bytes') / 1e6:.1f} MB")
    return result


if __name__ == "__main__":
    main()
