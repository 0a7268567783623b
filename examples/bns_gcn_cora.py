"""BNS-GCN ("BDS-GCN") on Cora through the Python API: every round each client keeps 10 % of
its cross-client boundary nodes and receives their features and hidden states through the
server. Run: FEDGL_DATA=../shared/data python examples/bns_gcn_cora.py"""

from __future__ import annotations

import fedgl


def main(**overrides: object) -> fedgl.RunResult:
    config = {"algorithm": "bns-gcn", "boundary_rate": 0.1, "dataset": "cora", "clients": 10,
              "rounds": 100, "eval_every": 10, "progress": False, **overrides}
    result = fedgl.run(config)
    print(f"BNS-GCN (rate 0.1): test acc {result.mean('test_acc'):.4f}, "
          f"training {result.mean('train_bytes') / 1e6:.1f} MB")
    return result


if __name__ == "__main__":
    main()
