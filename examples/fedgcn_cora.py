"""FedGCN on Cora through the Python API: one pre-training exchange of 2-hop neighbour sums,
then FedAvg. Run: FEDGL_DATA=../shared/data python examples/fedgcn_cora.py"""

from __future__ import annotations

import fedgl


def main(**overrides: object) -> fedgl.RunResult:
    config = {"algorithm": "fedgcn", "hops": 2, "dataset": "cora", "clients": 10, "beta": 1.0,
              "rounds": 100, "progress": False, **overrides}
    result = fedgl.run(config)
    print(f"FedGCN 2-hop: test acc {result.mean('test_acc'):.4f}, "
          f"pre-training {result.mean('pretrain_bytes') / 1e6:.1f} MB, "
          f"training {result.mean('train_bytes') / 1e6:.1f} MB")
    return result


if __name__ == "__main__":
    main()
