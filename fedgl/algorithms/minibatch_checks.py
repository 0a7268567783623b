"""Config rules of mini-batch local training, kept apart from the sampler (which imports torch)
so that checking a configuration imports no model code."""

from __future__ import annotations

from fedgl.config import parse_num_neighbors
from fedgl.errors import ConfigError


def check_minibatch(cfg: object) -> None:
    """Config rules of mini-batch local training (one line each, naming the fix)."""
    batch = int(getattr(cfg, "batch_size", 0))
    fanouts = str(getattr(cfg, "num_neighbors", "")).strip()
    if batch == 0 and fanouts not in ("", "-1", "0", "all"):
        raise ConfigError(f"num_neighbors ({fanouts}) sample neighbours for mini-batches; add "
                          "--batch-size N (e.g. 1024) or drop --num-neighbors")
    if batch > 0:
        model = getattr(cfg, "model", "gcn")
        if model not in ("gcn", "sage"):
            raise ConfigError(f"mini-batch local training runs gcn or sage models, not {model}; "
                              "use --model gcn or --batch-size 0")
        parse_num_neighbors(fanouts, int(getattr(cfg, "layers", 2)))
