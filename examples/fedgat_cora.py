"""FedGAT on Cora through the Python API: first-layer attention approximated by a polynomial,
obfuscated matrices sent once, then FedAvg. Run: FEDGL_DATA=../shared/data python
examples/fedgat_cora.py"""

from __future__ import annotations

import fedgl


def main(**overrides: object) -> fedgl.RunResult:
    config = {"algorithm": "fedgat", "dataset": "cora", "clients": 10, "rounds": 50,
              "progress": False, **overrides}
    result = fedgl.run(config)
    print(f"FedGAT: test acc {result.mean('test_acc'):.4f}, "
          f"pre-training {result.mean('pretrain_bytes') / 1e6:.1f} MB")
    return result


if __name__ == "__main__":
    main()
