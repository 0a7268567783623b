"""FedSage+ on Cora through the Python API: neighbour generators trained federatedly (other
clients return only gradients), local subgraphs mended, then FedAvg.
Run: FEDGL_DATA=../shared/data python examples/fedsage_plus_cora.py"""

from __future__ import annotations

import fedgl


def main(**overrides: object) -> fedgl.RunResult:
    config = {"algorithm": "fedsage-plus", "dataset": "cora", "clients": 5, "rounds": 100,
              "num_pred": 5, "hidden_portion": 0.5, "gen_epochs": 5, "gen_batch_size": 0,
              "cross_clients": 1, "progress": False, **overrides}
    result = fedgl.run(config)
    print(f"FedSage+: test acc {result.mean('test_acc'):.4f}, "
          f"generator training {result.mean('pretrain_bytes') / 1e6:.1f} MB")
    return result


if __name__ == "__main__":
    main()
