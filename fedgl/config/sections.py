"""The common sections of a run's configuration: small validated dataclasses.

Every algorithm reads these; an algorithm's own keys live in its options class
(``fedgl/algorithms/<name>/options.py``). Field names are YAML keys and, with dashes, CLI flags.
``validate()`` checks a section on its own; checks that span sections live in
:meth:`fedgl.config.Config.validate`.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, fields

from fedgl.config.fields import (
    at_least,
    at_most,
    check_fields,
    choice,
    option,
    parse_num_neighbors,
)
from fedgl.errors import ConfigError

NAMED_DATASETS = ("cora", "citeseer", "pubmed", "sbm", "ogbn-arxiv", "ogbn-products",
                  "ogbn-papers100m", "reddit")
DATASET_PREFIXES = ("npz:", "synthetic:", "own:")
PARTITIONS = ("dirichlet", "iid", "metis", "metis-train", "random", "powerlaw", "louvain", "p-split")
#: the partition of the organisations' own data (``dataset: own:NAME``): their shards are their
#: own tables, split by no partitioner; a run over them records this, and never another
OWN_PARTITION = "own"
#: partition keys and the partitions that read them (off its default elsewhere: an error)
PARTITION_KEYS = {"beta": ("dirichlet",), "mcmahan_p": ("p-split",),
                  "metis_max_degree": ("metis", "metis-train")}
_READERS = {"beta": "the dirichlet partition", "mcmahan_p": "the p-split partition",
            "metis_max_degree": "the metis partitions"}
AGGREGATIONS = ("uniform", "weighted")
MODELS = ("gcn", "sage", "gin")
SETTINGS = ("horizontal", "vertical")
FEATURE_SPLITS = ("random", "contiguous")
RUNTIMES = ("local", "ray")
FAILURE_POLICIES = ("restart", "drop", "abort")
SECURE_SUMS = ("none", "mask", "robust", "he")

# Upper bounds: beyond them a value only overflows, hangs or exhausts memory (the memory check
# in fedgl.resources refuses what does not fit on this machine within them).
MAX_NODES = 10**9
MAX_FEATURES = 10**6
MAX_CLIENTS = 100_000
MAX_LAYERS = 64
MAX_HIDDEN = 2**16
MAX_STEPS = 10**7
MAX_REPEATS = 10_000
MAX_THREADS = 256


class Section:
    """Base of a config section: type checks, then the section's own rules."""

    title: str = ""

    def validate(self) -> None:
        check_fields(self)
        self.check()

    def check(self) -> None:
        """Ranges and choices of this section (override)."""


@dataclass(frozen=True)
class DataConfig(Section):
    """Which graph, and where its files are."""

    title = "data"
    dataset: str = option("sbm", "dataset: cora, citeseer, pubmed, sbm, npz:PATH, ogbn-arxiv, "
                                 "ogbn-products, ogbn-papers100M, reddit, or "
                                 "synthetic:arxiv|products|N,E,d,C (generated, cached)")
    data_root: str | None = option(None, "folder holding datasets (unset: $FEDGL_DATA, else the "
                                         "user cache)")
    normalize_features: bool = option(False, "row-normalise node features (Kipf & Welling; "
                                             "FedGCN uses raw)")
    sbm_nodes: int = option(2708, "SBM: number of nodes N")
    sbm_classes: int = option(7, "SBM: number of classes C")
    sbm_alpha: float = option(0.01, "SBM: within-class edge probability α")
    sbm_mu: float = option(0.1, "SBM: between-class probability is μα")
    sbm_features: int = option(64, "SBM: feature dimension d")
    sbm_noise: float = option(1.0, "SBM: feature noise σ (x ~ N(H y, σ²))")

    def check(self) -> None:
        ds = self.dataset.lower()
        if not (ds in NAMED_DATASETS or ds.startswith(DATASET_PREFIXES)):
            close = difflib.get_close_matches(ds, NAMED_DATASETS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown dataset '{self.dataset}'{hint}; use one of "
                              f"{', '.join(NAMED_DATASETS)}, npz:PATH or "
                              "synthetic:arxiv|products|N,E,d,C")
        if ds.startswith("own:") and not re.fullmatch(r"own:[A-Za-z0-9_.-]{1,64}", self.dataset):
            raise ConfigError(f"dataset '{self.dataset}': an organisations' own data set is "
                              "own:NAME (letters, digits, . _ -), the --name given to fedgl ingest")
        if ds.startswith("npz:") and len(self.dataset) <= 4:
            raise ConfigError("dataset 'npz:' needs a path, e.g. --dataset npz:data/cora_ml.npz")
        if ds.startswith("synthetic:"):
            arg = ds.split(":", 1)[1]
            if arg not in ("arxiv", "products") and not re.fullmatch(r"(\d+(e\d+)?,){3}\d+", arg):
                raise ConfigError(f"unknown synthetic dataset '{self.dataset}'; use synthetic:arxiv, "
                                  "synthetic:products or synthetic:N,E,d,C (four integers, e.g. "
                                  "synthetic:20000,100000,32,10)")
        at_least("sbm_nodes", self.sbm_nodes, 2)
        at_least("sbm_classes", self.sbm_classes, 2)
        at_least("sbm_features", self.sbm_features, 1)
        if not 0 < self.sbm_alpha <= 1:
            raise ConfigError(f"sbm_alpha must be in (0, 1] (got {self.sbm_alpha})")
        if not 0 <= self.sbm_mu <= 1:
            raise ConfigError(f"sbm_mu must be in [0, 1] (got {self.sbm_mu})")
        if self.sbm_noise < 0:
            raise ConfigError(f"sbm_noise must be >= 0 (got {self.sbm_noise})")
        at_most("sbm_nodes", self.sbm_nodes, MAX_NODES, "load a real large graph instead")
        at_most("sbm_features", self.sbm_features, MAX_FEATURES)
        at_most("sbm_classes", self.sbm_classes, self.sbm_nodes // 2,
                "every class needs nodes; lower --sbm-classes or raise --sbm-nodes")
        at_most("sbm_noise", self.sbm_noise, 1e6)


@dataclass(frozen=True)
class FederationConfig(Section):
    """Who the parties are and how the graph is split among them."""

    title = "federation"
    clients: int = option(10, "number of clients K")
    setting: str | None = option(None, "horizontal (nodes split) or vertical (features and edges "
                                       "split); unset: the algorithm's")
    partition: str = option("dirichlet", "horizontal node split: dirichlet (label skew), iid, "
                                         "metis, metis-train (training nodes balanced too), "
                                         "random, powerlaw (power-law client sizes), louvain or "
                                         "p-split (--mcmahan-p); own: the organisations' own "
                                         "shards (set by --dataset own:NAME)")
    beta: float = option(1.0, "Dirichlet concentration β (small = non-i.i.d.)")
    mcmahan_p: float = option(0.5, "p-split partition: McMahan's p (1 = i.i.d., 0 = one class "
                                   "per client)")
    metis_max_degree: int = option(0, "metis partitions: partition a seeded, symmetric sparsification "
                                      "keeping at most this many edges per node (0: the whole "
                                      "graph; e.g. 10 lets METIS fit in memory at products size)")
    min_client_size: int = option(10, "redraw the split until every client has at least this "
                                      "many nodes")
    feature_split: str = option("random", "vertical: feature columns split in seeded random or "
                                          "contiguous blocks")
    edge_share: float = option(0.8, "vertical: share of the undirected edges each client keeps "
                                    "(seeded)")
    clients_per_round: int = option(0, "clients sampled per round (seeded; 0: all)")
    aggregation: str = option("uniform", "FedAvg weights: uniform (1/K, FedGCN eq. 2) or "
                                         "weighted by training nodes")

    def check(self) -> None:
        at_least("clients", self.clients, 1)
        at_most("clients", self.clients, MAX_CLIENTS)
        at_most("min_client_size", self.min_client_size, MAX_NODES)
        at_most("beta", self.beta, 1e12, "use e.g. 10000 for an i.i.d.-like split")
        at_least("min_client_size", self.min_client_size, 1)
        at_least("clients_per_round", self.clients_per_round, 0)
        at_least("metis_max_degree", self.metis_max_degree, 0)
        if self.partition != OWN_PARTITION:   # own: checked with the data set (Config)
            choice("partition", self.partition, PARTITIONS)
        choice("aggregation", self.aggregation, AGGREGATIONS)
        choice("feature_split", self.feature_split, FEATURE_SPLITS)
        if self.setting is not None:
            choice("setting", self.setting, SETTINGS)
        if not 0.0 <= self.mcmahan_p <= 1.0:
            raise ConfigError(f"mcmahan_p must be in [0, 1] (got {self.mcmahan_p}); 1 is i.i.d., "
                              "0 one class per client")
        if self.beta <= 0:
            raise ConfigError(f"beta must be > 0 (got {self.beta}); use e.g. 1 (non-i.i.d.) "
                              "or 10000 (i.i.d.)")
        if not 0 < self.edge_share <= 1:
            raise ConfigError(f"edge_share must be in (0, 1] (got {self.edge_share}); use e.g. 0.8")
        for key, readers in PARTITION_KEYS.items():
            if self.partition == OWN_PARTITION:
                break
            if self.partition not in readers and getattr(self, key) != _default_of(key):
                raise ConfigError(f"{key} applies to {_READERS[key]} (got --partition "
                                  f"{self.partition}); drop --{key.replace('_', '-')} or use "
                                  f"--partition {readers[0]}")
        if self.clients_per_round > self.clients:
            raise ConfigError(f"clients_per_round ({self.clients_per_round}) exceeds clients "
                              f"({self.clients}); use at most {self.clients}, or 0 for all")


def own_keys_line(keys: list[str]) -> str:
    """The one line refusing data-shaping ``keys`` over the organisations' own shards."""
    flags = ", ".join(f"--{k.replace('_', '-')}" for k in keys)
    return (f"the organisations' own shards decide the partition; drop {flags} (it would not "
            "run, only be written into the result)")


def _default_of(key: str) -> object:
    return next(f.default for f in fields(FederationConfig) if f.name == key)


@dataclass(frozen=True)
class ModelConfig(Section):
    """The GNN every party trains."""

    title = "model"
    model: str = option("gcn", "GNN: gcn, sage or gin")
    layers: int = option(2, "number of GNN layers")
    hidden: int = option(16, "hidden units")
    dropout: float = option(0.5, "dropout between layers")

    def check(self) -> None:
        choice("model", self.model, MODELS)
        at_least("layers", self.layers, 1)
        at_least("hidden", self.hidden, 1)
        at_most("layers", self.layers, MAX_LAYERS)
        at_most("hidden", self.hidden, MAX_HIDDEN)
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1) (got {self.dropout})")


@dataclass(frozen=True)
class OptimConfig(Section):
    """Rounds, local steps and the local optimiser."""

    title = "optimisation"
    rounds: int = option(300, "communication rounds T (centralised: T x local_steps steps; the "
                              "mini-batch FedSGD algorithms: iterations; per algorithm: "
                              "fedgl run --algorithm X --help)")
    local_steps: int = option(3, "local SGD steps E per round")
    lr: float = option(0.5, "learning rate η")
    weight_decay: float = option(5e-4, "L2 regularisation")
    batch_size: int = option(0, "training nodes per mini-batch (0: full batch)")
    num_neighbors: str = option("", "neighbours sampled per hop, first layer first as PyG's "
                                    "NeighborLoader: 15,10 = 15 one-hop, then 10 two-hop "
                                    "neighbours per node (one number: every layer; empty: all)")

    def check(self) -> None:
        at_least("rounds", self.rounds, 0)
        at_least("local_steps", self.local_steps, 1)
        at_least("batch_size", self.batch_size, 0)
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0 (got {self.lr})")
        at_most("rounds", self.rounds, MAX_STEPS)
        at_most("local_steps", self.local_steps, MAX_STEPS)
        at_most("lr", self.lr, 1e4, "a step that large only overflows; use e.g. 0.5")
        at_most("weight_decay", self.weight_decay, 1e4)
        at_most("batch_size", self.batch_size, MAX_NODES)
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay must be >= 0 (got {self.weight_decay})")
        parse_num_neighbors(self.num_neighbors, max(1, len(self.num_neighbors.split(","))))


@dataclass(frozen=True)
class ExperimentConfig(Section):
    """Repeats, seeds, evaluation and the process's resources."""

    title = "experiment"
    repeats: int = option(1, "independent repeats (seeds seed, seed+1, ...)")
    seed: int = option(0, "base random seed")
    eval_every: int = option(1, "evaluate every N rounds (the last round is always evaluated)")
    oracle_eval: bool = option(True, "also score the global model on the full graph (oracle "
                                     "metric)")
    device: str = option("cpu", "torch device: cpu or cuda")
    threads: int = option(1, "torch CPU threads in the driver and local clients (0: torch's "
                             "default; one avoids oversubscription)")
    progress: bool = option(True, "show a progress bar over rounds")
    allow_divergence: bool = option(False, "a non-finite loss or model stops training and is "
                                           "recorded in the result instead of ending the run "
                                           "with an error")

    def check(self) -> None:
        at_least("repeats", self.repeats, 1)
        at_least("seed", self.seed, 0)
        at_least("eval_every", self.eval_every, 1)
        at_least("threads", self.threads, 0)
        at_most("repeats", self.repeats, MAX_REPEATS)
        at_most("seed", self.seed, 2**63 - 1 - self.repeats,
                "repeats use seed, seed+1, ... and torch seeds are 64-bit signed")
        at_most("eval_every", self.eval_every, MAX_STEPS)
        at_most("threads", self.threads, MAX_THREADS, "more threads than that only oversubscribe")
        if not re.fullmatch(r"cpu|cuda(:\d{1,3})?", self.device):
            raise ConfigError(f"device must be cpu, cuda or cuda:N (got '{self.device}')")


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bps|b/s|bit/s)\s*$", re.IGNORECASE)
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s)\s*$", re.IGNORECASE)


def parse_bandwidth(text: str) -> float | None:
    """``"1Gbps"`` -> 1e9 bits per second; ``""`` -> None (no simulated network)."""
    if not str(text).strip():
        return None
    m = _RATE.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"bandwidth must look like 100Mbps or 1Gbps (got '{text}')")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2).lower()]


def parse_latency(text: str) -> float:
    """``"5ms"`` -> 0.005 seconds; ``""`` -> 0."""
    if not str(text).strip():
        return 0.0
    m = _TIME.match(str(text))
    if not m:
        raise ConfigError(f"latency must look like 5ms, 200us or 0.1s (got '{text}')")
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2).lower()]


@dataclass(frozen=True)
class RuntimeConfig(Section):
    """Where the clients run, what happens when they fail, and the simulated network."""

    title = "runtime"
    runtime: str = option("local", "where clients run: local (in-process) or ray (one actor each)")
    batch_clients: bool = option(True, "local runtime: all clients' local steps (and evaluation) "
                                       "as one batched computation where that equals their own "
                                       "fit; --no-batch-clients: one by one")
    ray_address: str | None = option(None, "join this Ray cluster (e.g. 127.0.0.1:6379) instead "
                                           "of starting a local one")
    client_cpus: float = option(0.0, "Ray: CPUs per client actor (0: share the cluster's CPUs)")
    client_gpus: float = option(0.0, "Ray: GPUs per client actor")
    on_client_failure: str = option("restart", "when a client dies: restart, drop or abort")
    max_client_restarts: int = option(3, "restarts allowed per client before the run aborts")
    checkpoint_every: int = option(0, "write a resumable checkpoint to --out every N rounds "
                                      "(0: off)")
    bandwidth: str = option("", "simulated network bandwidth per client link, e.g. 1Gbps "
                                "(empty: no simulated time)")
    latency: str = option("", "simulated network latency per message, e.g. 5ms")

    def check(self) -> None:
        choice("runtime", self.runtime, RUNTIMES)
        choice("on_client_failure", self.on_client_failure, FAILURE_POLICIES)
        at_least("checkpoint_every", self.checkpoint_every, 0)
        at_least("max_client_restarts", self.max_client_restarts, 0)
        at_most("checkpoint_every", self.checkpoint_every, MAX_STEPS)
        at_most("max_client_restarts", self.max_client_restarts, 1000)
        at_most("client_cpus", self.client_cpus, 1024)
        at_most("client_gpus", self.client_gpus, 64)
        if self.client_cpus < 0 or self.client_gpus < 0:
            raise ConfigError("client_cpus and client_gpus must be >= 0 "
                              f"(got {self.client_cpus}, {self.client_gpus})")
        if self.ray_address is not None and self.runtime != "ray":
            raise ConfigError("ray_address needs --runtime ray")
        parse_bandwidth(self.bandwidth)
        parse_latency(self.latency)
        if self.latency.strip() and parse_bandwidth(self.bandwidth) is None:
            raise ConfigError("latency needs a bandwidth for the simulated network; add e.g. "
                              "--bandwidth 1Gbps")


@dataclass(frozen=True)
class PrivacyConfig(Section):
    """How sums and models are protected. An algorithm lists the features it supports
    (``AlgorithmSpec.privacy``); a feature set off its default for another algorithm is an error.
    Each field's ``feature`` metadata names the feature it belongs to."""

    title = "privacy"
    secure_sum: str = option("none", "how the server adds sums: none (plaintext), mask (pairwise "
                                     "masks, authenticated keys, every client needed), robust "
                                     "(double masking with Shamir-shared recovery: survives "
                                     "dropouts and a server faking them) or he (CKKS, keys held "
                                     "by clients)", feature="secure_sum")
    secagg_threshold: int = option(0, "robust secure sum: Shamir threshold t (0: clients // 2 + "
                                      "1); a sum survives up to clients - t dropouts",
                                   feature="secure_sum")
    secure_models: bool = option(False, "average models through the mask/robust secure sum: the "
                                        "server sees only the average model",
                                 feature="secure_sum")
    encrypt_models: bool = option(False, "CKKS-encrypt model updates; the server adds "
                                         "ciphertexts and never sees a model (needs "
                                         "--no-oracle-eval)", feature="encrypt_models")
    he_poly_degree: int = option(4096, "CKKS ring dimension N, a power of two (N/2 slots per "
                                       "ciphertext)", feature="he")
    he_coeff_bits: str = option("60,49", "CKKS coefficient-modulus primes in bits, comma-"
                                         "separated, the last one special", feature="he")
    he_scale_bits: int = option(40, "CKKS scale 2^bits for real values (unpacked sums, models)",
                                feature="he")
    he_pack: int = option(1, "values packed per CKKS slot as fixed-point integers (1: plain CKKS "
                             "reals; 2-4: FedGCN appendix G.2)", feature="he")
    he_key_holder: int = option(0, "client that generates the CKKS key and seals it to the "
                                   "others", feature="he")
    dp_epsilon: float | None = option(None, "differential privacy ε for released sums (Gaussian "
                                            "mechanism; off when unset)", feature="dp")
    dp_delta: float = option(1e-5, "DP δ", feature="dp")
    dp_clip: float = option(1.0, "DP: clip every node's feature vector to this L2 norm first",
                            feature="dp")
    dp_budget: float | None = option(None, "DP: total ε each client will spend on its data set "
                                           "(over runs, with --state-dir); a new release beyond "
                                           "it is refused (unset: no limit)", feature="dp")
    state_dir: str | None = option(None, "folder where each simulated client keeps its input "
                                         "record (<dir>/client-<k>: the one secure sum each "
                                         "input entered, its DP noise, the ε spent), across "
                                         "restarts and runs (unset: in memory, for the run)",
                                   feature="secure_sum")
    min_contributors: int = option(1, "drop the remote part of a received sum made of fewer than "
                                      "k remote nodes", feature="min_contributors")
    min_partial_nodes: int = option(1, "send a partial sum for another organisation's node only "
                                       "where it aggregates at least k of the client's own "
                                       "nodes (withheld rows are sent as zeros; 1: off)",
                                    feature="min_contributors")
    own_scoring_only: bool = option(False, "in an exchange over changed data (scoring nodes that "
                                           "arrived after training: the client's second or later "
                                           "pre-training release), send no partial sums for "
                                           "other organisations' nodes (zeros)",
                                    feature="release_budget")
    pretrain_releases: int | None = option(None, "pre-training releases each client makes over "
                                                  "its data set, counted by content (with "
                                                  "state_dir: across runs): training is one, "
                                                  "each scoring of new nodes one more; a release "
                                                  "beyond it is refused (unset: no limit)",
                                           feature="release_budget")

    def check(self) -> None:
        choice("secure_sum", self.secure_sum, SECURE_SUMS)
        at_least("secagg_threshold", self.secagg_threshold, 0)
        if self.secagg_threshold and self.secure_sum != "robust":
            raise ConfigError("secagg_threshold is for the robust secure sum; add --secure-sum "
                              "robust or drop --secagg-threshold")
        if self.secure_models and self.secure_sum not in ("mask", "robust"):
            raise ConfigError("secure_models averages models through the mask or robust secure "
                              "sum; add --secure-sum mask (or robust)")
        if self.secure_models and self.encrypt_models:
            raise ConfigError("secure_models and encrypt_models both protect the models; keep one")
        if self.min_contributors < 1:
            raise ConfigError(f"min_contributors must be >= 1 (got {self.min_contributors}); use "
                              "1 (off) or 2 to block exact disclosure of a single remote neighbour")
        at_least("he_key_holder", self.he_key_holder, 0)
        if self.dp_epsilon is not None and self.dp_epsilon <= 0:
            raise ConfigError(f"dp_epsilon must be > 0 (got {self.dp_epsilon}); use e.g. "
                              "--dp-epsilon 1, or leave it unset to turn DP off")
        if not 0 < self.dp_delta < 1:
            raise ConfigError(f"dp_delta must be in (0, 1) (got {self.dp_delta}); use e.g. 1e-5")
        if self.dp_clip <= 0:
            raise ConfigError(f"dp_clip must be > 0 (got {self.dp_clip}); use e.g. --dp-clip 1")
        at_most("dp_clip", self.dp_clip, 1e6, "clip to the scale of the features, e.g. 1")
        if self.dp_budget is not None:
            if not 0 < self.dp_budget < math.inf:
                raise ConfigError(f"dp_budget must be > 0 (got {self.dp_budget}); use e.g. "
                                  "--dp-budget 4, or leave it unset for no limit")
            if self.dp_epsilon is None:
                raise ConfigError("dp_budget limits the ε of DP releases; add --dp-epsilon, or "
                                  "drop --dp-budget")
            if self.dp_epsilon > self.dp_budget:
                raise ConfigError(f"dp_epsilon {self.dp_epsilon:g} is above dp_budget "
                                  f"{self.dp_budget:g}: even one release would exceed it; lower "
                                  "--dp-epsilon or raise --dp-budget")
        if self.state_dir is not None and not str(self.state_dir).strip():
            raise ConfigError("state_dir is empty; give a folder, or leave it unset")
        at_most("min_contributors", self.min_contributors, MAX_NODES)
        if isinstance(self.min_partial_nodes, bool) or self.min_partial_nodes < 1:
            raise ConfigError(f"min_partial_nodes must be >= 1 (got {self.min_partial_nodes}); "
                              "use 1 (off) or 2 so that no partial sum carries one own node")
        at_most("min_partial_nodes", self.min_partial_nodes, MAX_NODES)
        if self.pretrain_releases is not None and (isinstance(self.pretrain_releases, bool)
                                                   or self.pretrain_releases < 1):
            raise ConfigError(f"pretrain_releases must be >= 1 (got {self.pretrain_releases}); "
                              "use 1 (training only), or leave it unset for no limit")

    def features_in_use(self) -> list[str]:
        """Privacy features whose keys are off their defaults, in field order."""
        from dataclasses import fields

        used: list[str] = []
        for f in fields(self):
            if getattr(self, f.name) != f.default and f.metadata["feature"] not in used:
                used.append(f.metadata["feature"])
        return used


@dataclass(frozen=True)
class OutputConfig(Section):
    """Where results go."""

    title = "output"
    out: str | None = option(None, "results folder (CLI default: runs/<algorithm>-<dataset>-"
                                   "<time>)")


SECTIONS: dict[str, type[Section]] = {
    "data": DataConfig, "federation": FederationConfig, "model": ModelConfig,
    "optim": OptimConfig, "experiment": ExperimentConfig, "runtime": RuntimeConfig,
    "privacy": PrivacyConfig, "output": OutputConfig,
}
