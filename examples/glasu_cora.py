"""GLASU on Cora through the Python API: the vertical setting (every client sees all nodes, but
only its own block of feature columns and its own edges), a model split between clients and
server with lazy aggregation at K of L layers and Q stale local updates per round. The recipe
below is the paper's Table 1 setting as reproduced here (also the algorithm's defaults; written
out to show it): M = 3 clients, GCNII with L = 4 layers of 64 hidden, aggregation at layers 2
and 4 (K = 2), Q = 4, batch 16 with 3 neighbours per node at every layer, Adam at lr 0.01.
``rounds`` counts communication rounds of Q updates each (200 x 4 = 800 updates).
Run: FEDGL_DATA=../shared/data python examples/glasu_cora.py"""

from __future__ import annotations

import fedgl

RECIPE = {"clients": 3, "layers": 4, "hidden": 64, "dropout": 0.5, "backbone": "gcnii",
          "agg_layers": "2", "stale_steps": 4, "batch_size": 16, "num_neighbors": "3",
          "glasu_optimizer": "adam", "lr": 0.01, "weight_decay": 5e-4, "rounds": 200}


def main(**overrides: object) -> fedgl.RunResult:
    config = {"algorithm": "glasu", "dataset": "cora", **RECIPE, "eval_every": 5,
              "progress": False, **overrides}
    result = fedgl.run(config)
    print(f"GLASU (K = 2, Q = 4): test acc {result.mean('test_acc'):.4f} (validation-selected "
          f"{result.mean('selected_test_acc'):.4f}), training "
          f"{result.mean('train_bytes') / 1e6:.1f} MB")
    return result


if __name__ == "__main__":
    main()
