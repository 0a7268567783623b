"""One validated configuration schema shared by every algorithm.

A :class:`Config` can be built from keyword arguments, a dict, or a YAML file; CLI flags override
YAML values (``fedgl run config.yaml --rounds 50``). Every field is validated in
:meth:`Config.validate`, which raises :class:`~fedgl.errors.ConfigError` with a message naming the
field and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from fedgl.errors import ConfigError

ALGORITHMS = ("fedgcn", "centralized", "fedgat", "distgat", "centralized-gat")
GAT_ALGORITHMS = ("fedgat", "distgat", "centralized-gat")
MODELS = ("gcn", "sage")
PARTITIONS = ("dirichlet", "iid")
AGGREGATIONS = ("uniform", "weighted")
NAMED_DATASETS = ("cora", "citeseer", "pubmed", "sbm")
RUNTIMES = ("local", "ray")
FAILURE_POLICIES = ("restart", "drop", "abort")


def _f(default: Any, help: str, **extra: Any) -> Any:
    return field(default=default, metadata={"help": help, **extra})


@dataclass
class Config:
    """All settings of a run. Field names are the YAML keys; ``--field-name`` are the CLI flags."""

    # what to run
    algorithm: str = _f("fedgcn", f"algorithm: one of {', '.join(ALGORITHMS)}")
    dataset: str = _f("sbm", "dataset: cora, citeseer, pubmed, sbm or npz:PATH")
    data_root: str | None = _f(None, "folder holding datasets (default: $FEDGL_DATA, else cache)")
    # federation
    clients: int = _f(10, "number of clients K")
    partition: str = _f("dirichlet", "node split: dirichlet (label skew) or iid")
    beta: float = _f(1.0, "Dirichlet concentration β (small = non-i.i.d.)")
    min_client_size: int = _f(10, "redraw the split until every client has at least this many nodes")
    hops: int = _f(2, "FedGCN communication hops L (0, 1, 2, ...; at most --layers)")
    aggregation: str = _f("uniform", "FedAvg weights: uniform (1/K, paper eq. 2) or weighted")
    # model
    model: str = _f("gcn", "GNN: gcn or sage")
    layers: int = _f(2, "number of GNN layers")
    hidden: int = _f(16, "hidden units")
    dropout: float = _f(0.5, "dropout between layers")
    normalize_features: bool = _f(False, "row-normalise node features (Kipf & Welling; FedGCN uses raw)")
    # optimisation
    rounds: int = _f(300, "communication rounds T (centralised: T x local_steps steps)")
    local_steps: int = _f(3, "local SGD steps E per round")
    lr: float = _f(0.5, "learning rate η")
    weight_decay: float = _f(5e-4, "L2 regularisation")
    # experiment
    repeats: int = _f(1, "independent repeats (seeds seed, seed+1, ...)")
    seed: int = _f(0, "base random seed")
    eval_every: int = _f(1, "evaluate every N rounds (the last round is always evaluated)")
    oracle_eval: bool = _f(True, "also score the global model on the full graph (oracle metric)")
    device: str = _f("cpu", "torch device: cpu or cuda")
    threads: int = _f(1, "torch CPU threads in the driver and local clients (0: torch's default; "
                         "per-client work is small, and one thread avoids oversubscription)")
    progress: bool = _f(True, "show a progress bar over rounds")
    out: str | None = _f(None, "results folder (CLI default: runs/<algorithm>-<dataset>-<time>)")
    checkpoint_every: int = _f(0, "write a resumable checkpoint to --out every N rounds (0: off)")
    # runtime (issue 3)
    runtime: str = _f("local", "where clients run: local (in-process) or ray (one actor each)")
    batch_clients: bool = _f(True, "local runtime: take all clients' local steps (and evaluation) "
                                   "as one batched computation where that reproduces their own "
                                   "fit (GCN and GAT "
                                   "models, SGD; not with encrypt_models or the FedGAT protocol "
                                   "backend); --no-batch-clients: one by one")
    ray_address: str | None = _f(None, "join this Ray cluster (e.g. 127.0.0.1:6379) instead of "
                                       "starting a local one")
    client_cpus: float = _f(0.0, "Ray: CPUs per client actor (0: share the cluster's CPUs)")
    client_gpus: float = _f(0.0, "Ray: GPUs per client actor")
    on_client_failure: str = _f("restart", "when a client dies: restart, drop or abort")
    max_client_restarts: int = _f(3, "restarts allowed per client before the run aborts")
    # privacy (issue 4)
    secure_sum: str = _f("none", "how the server adds FedGCN's pre-training sums: none (plaintext), "
                                 "mask (pairwise-masked secure aggregation) or he (CKKS, keys held "
                                 "by clients)")
    encrypt_models: bool = _f(False, "CKKS-encrypt model updates; the server adds ciphertexts and "
                                     "never sees a model (needs --no-oracle-eval)")
    he_poly_degree: int = _f(4096, "CKKS ring dimension N, a power of two (N/2 slots per ciphertext)")
    he_coeff_bits: str = _f("60,49", "CKKS coefficient-modulus primes in bits, comma-separated, the "
                                     "last one special; 128-bit security caps the total by N")
    he_scale_bits: int = _f(40, "CKKS scale 2^bits for real values (unpacked sums, models)")
    he_pack: int = _f(1, "values packed per CKKS slot as fixed-point integers (1: plain CKKS "
                         "reals; 2-4: integer packing, FedGCN appendix G.2)")
    he_key_holder: int = _f(0, "client that generates the CKKS key and seals it to the others")
    dp_epsilon: float | None = _f(None, "differential privacy ε for the pre-training sums "
                                        "(Gaussian mechanism; off when unset)")
    dp_delta: float = _f(1e-5, "DP δ")
    dp_clip: float = _f(1.0, "DP: clip every node's feature vector to this L2 norm first")
    min_contributors: int = _f(1, "drop the remote part of a received sum made of fewer than k "
                                  "remote nodes (2 blocks exact disclosure of one neighbour)")
    # FedGAT (issue 5)
    degree: int = _f(16, "FedGAT: degree p of the Chebyshev approximation of the first-layer "
                         "attention score exp(LeakyReLU(x))")
    heads: int = _f(8, "GAT: attention heads per hidden layer")
    gat_hidden: int = _f(8, "GAT: hidden units per head")
    output_heads: int = _f(1, "GAT: heads of the output layer, averaged (8 for PubMed)")
    gat_optimizer: str = _f("sgd", "GAT algorithms' local optimiser: sgd (with --lr, "
                                   "--weight-decay) or adam (state kept per client across rounds; "
                                   "use e.g. --lr 0.005)")
    gat_features: str = _f("l2", "GAT algorithms' feature scaling: l2 (unit rows, FedGAT's "
                                 "assumption 3), center-l2 (the authors' code) or none")
    fedgat_backend: str = _f("fast", "FedGAT first layer: fast (edge-wise; the server sends raw "
                                     "feature rows) or protocol (the paper's matrices)")
    fedgat_range: float = _f(2.0, "FedGAT: interval [-R, R] of the approximation")
    fedgat_cap: bool = _f(True, "FedGAT: rescale attention vectors so |x_ij| <= R for unit-norm "
                                "features (keeps the polynomial in its interval)")
    fedgat_psi: str = _f("leaky_relu", "FedGAT: score exp(psi(x)) with psi leaky_relu or smooth "
                                       "(softplus-smoothed, the authors' code)")
    fedgat_coefficients: str = _f("projection", "FedGAT: Chebyshev coefficients by projection, "
                                                "interpolation or lstsq")
    fedgat_basis: str = _f("power", "FedGAT: evaluate the polynomial as a power series (paper "
                                    "eq. 6) or by the Chebyshev recurrence (same polynomial)")
    fedgat_send_p: bool = _f(True, "FedGAT protocol: send P_i instead of the d matrices "
                                   "M_1i(s) = h_i(s) P_i for a client's own nodes")
    vec_fedgat: bool = _f(False, "Vector FedGAT (appendix F): cheaper, but LEAKS neighbour "
                                 "features to clients; needs --fedgat-backend protocol")
    fedgat_node_mb: float = _f(1024.0, "FedGAT protocol: refuse a node whose matrices exceed this "
                                       "many MB (use --fedgat-backend fast or --fedgat-max-degree)")
    fedgat_max_degree: int = _f(0, "GAT algorithms: keep at most this many neighbours per node, "
                                   "sampled by seed (0: all; the authors' limit_node_degree)")
    # synthetic stochastic block model (dataset: sbm), FedGCN appendix D.3
    sbm_nodes: int = _f(2708, "SBM: number of nodes N")
    sbm_classes: int = _f(7, "SBM: number of classes C")
    sbm_alpha: float = _f(0.01, "SBM: within-class edge probability α")
    sbm_mu: float = _f(0.1, "SBM: between-class probability is μα")
    sbm_features: int = _f(64, "SBM: feature dimension d")
    sbm_noise: float = _f(1.0, "SBM: feature noise σ (x ~ N(H y, σ²))")

    # ------------------------------------------------------------------ construction
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str = "config") -> Config:
        """Build a config from a mapping; unknown keys are an error naming the closest valid key."""
        names = cls.field_names()
        clean: dict[str, Any] = {}
        for key, value in values.items():
            name = str(key).replace("-", "_")
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(f"{source}: unknown key '{key}'{hint}; valid keys: see `fedgl run --help`")
            clean[name] = value
        cfg = cls(**clean)
        cfg.validate()
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> Config:
        """Read a YAML mapping of config keys; ``overrides`` (e.g. CLI flags) win over the file."""
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file '{p}' not found; pass an existing YAML file")
        try:
            data = yaml.safe_load(p.read_text())
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file '{p}' could not be read ({type(exc).__name__}); "
                              "pass a readable UTF-8 YAML file") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"config file '{p}' is not valid YAML{where}; fix its syntax") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config file '{p}' must hold a mapping of keys to values, "
                              f"not a {type(data).__name__}")
        merged = {**data, **(overrides or {})}
        return cls.from_dict(merged, source=f"config file '{p}'")

    def replace(self, **changes: Any) -> Config:
        cfg = dataclasses.replace(self, **changes)
        cfg.validate()
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check types and ranges of every field; raise ConfigError naming the first bad one."""
        for f in fields(self):
            self._check_type(f.name, getattr(self, f.name), f.type)
        self._choice("algorithm", ALGORITHMS)
        self._choice("model", MODELS)
        self._choice("partition", PARTITIONS)
        self._choice("aggregation", AGGREGATIONS)
        ds = self.dataset.lower()
        if not (ds in NAMED_DATASETS or ds.startswith("npz:")):
            close = difflib.get_close_matches(ds, NAMED_DATASETS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown dataset '{self.dataset}'{hint}; use one of "
                              f"{', '.join(NAMED_DATASETS)} or npz:PATH")
        if ds.startswith("npz:") and len(self.dataset) <= 4:
            raise ConfigError("dataset 'npz:' needs a path, e.g. --dataset npz:data/cora_ml.npz")
        self._at_least("clients", 1)
        self._at_least("min_client_size", 1)
        self._at_least("layers", 1)
        self._at_least("hidden", 1)
        self._at_least("rounds", 0)
        self._at_least("local_steps", 1)
        self._at_least("repeats", 1)
        self._at_least("eval_every", 1)
        self._at_least("seed", 0)
        self._at_least("threads", 0)
        self._validate_runtime()
        if self.beta <= 0:
            raise ConfigError(f"beta must be > 0 (got {self.beta}); use e.g. 1 (non-i.i.d.) "
                              "or 10000 (i.i.d.)")
        if self.hops < 0:
            raise ConfigError(f"hops must be 0, 1, 2, ... (got {self.hops})")
        if self.hops > 2:
            raise ConfigError(f"hops must be 0, 1 or 2 (got {self.hops}): the pre-training round "
                              "reaches 2 hops; deeper models use --layers with --hops 2")
        if self.hops > self.layers:
            raise ConfigError(f"hops ({self.hops}) cannot exceed layers ({self.layers}); "
                              f"use --hops {self.layers} or more --layers")
        if self.algorithm == "fedgcn" and self.model == "sage" and self.hops > 0:
            raise ConfigError("FedGCN with model 'sage' supports only --hops 0 (SAGE's root term "
                              "would need remote raw features); use --model gcn for 1/2-hop")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0 (got {self.lr})")
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay must be >= 0 (got {self.weight_decay})")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1) (got {self.dropout})")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"device must be cpu or cuda (got '{self.device}')")
        self._at_least("sbm_nodes", 2)
        self._at_least("sbm_classes", 2)
        self._at_least("sbm_features", 1)
        if not 0 < self.sbm_alpha <= 1:
            raise ConfigError(f"sbm_alpha must be in (0, 1] (got {self.sbm_alpha})")
        if not 0 <= self.sbm_mu <= 1:
            raise ConfigError(f"sbm_mu must be in [0, 1] (got {self.sbm_mu})")
        if self.sbm_noise < 0:
            raise ConfigError(f"sbm_noise must be >= 0 (got {self.sbm_noise})")
        self._validate_privacy()
        self._validate_fedgat()

    def _validate_runtime(self) -> None:
        self._choice("runtime", RUNTIMES)
        self._choice("on_client_failure", FAILURE_POLICIES)
        self._at_least("checkpoint_every", 0)
        self._at_least("max_client_restarts", 0)
        if self.client_cpus < 0 or self.client_gpus < 0:
            raise ConfigError("client_cpus and client_gpus must be >= 0 "
                              f"(got {self.client_cpus}, {self.client_gpus})")
        if self.ray_address is not None and self.runtime != "ray":
            raise ConfigError("ray_address needs --runtime ray")
        if self.checkpoint_every and self.algorithm == "centralized":
            raise ConfigError("checkpoints are for federated runs; drop --checkpoint-every "
                              "for the centralized algorithm")

    def _validate_privacy(self) -> None:
        """Privacy options (issue 4): one-line errors naming the fix."""
        from fedgl.privacy.he import HEParams, parse_coeff_bits

        self._choice("secure_sum", ("none", "mask", "he"))
        if self.min_contributors < 1:
            raise ConfigError(f"min_contributors must be >= 1 (got {self.min_contributors}); use 1 "
                              "(off) or 2 to block exact disclosure of a single remote neighbour")
        self._at_least("he_key_holder", 0)
        if self.he_key_holder >= self.clients:
            raise ConfigError(f"he_key_holder must be a client id below clients ({self.clients}); "
                              f"got {self.he_key_holder}")
        try:
            bits = parse_coeff_bits(self.he_coeff_bits)
        except ValueError:
            raise ConfigError(f"he_coeff_bits must be comma-separated prime sizes in bits, e.g. "
                              f"60,49 (got '{self.he_coeff_bits}')") from None
        problem = HEParams(self.he_poly_degree, bits, self.he_scale_bits, self.he_pack,
                           self.clients).problems()
        if problem:
            raise ConfigError(problem)
        if self.dp_epsilon is not None and self.dp_epsilon <= 0:
            raise ConfigError(f"dp_epsilon must be > 0 (got {self.dp_epsilon}); use e.g. "
                              "--dp-epsilon 1, or leave it unset to turn DP off")
        if not 0 < self.dp_delta < 1:
            raise ConfigError(f"dp_delta must be in (0, 1) (got {self.dp_delta}); use e.g. 1e-5")
        if self.dp_clip <= 0:
            raise ConfigError(f"dp_clip must be > 0 (got {self.dp_clip}); use e.g. --dp-clip 1")
        pretrain_only = [name for name, on in (("secure_sum", self.secure_sum != "none"),
                                               ("dp_epsilon", self.dp_epsilon is not None),
                                               ("min_contributors", self.min_contributors > 1))
                         if on]
        if pretrain_only and self.algorithm != "fedgcn":
            raise ConfigError(f"{pretrain_only[0]} applies to FedGCN's pre-training round; use "
                              "--algorithm fedgcn or drop it")
        if pretrain_only and self.hops == 0:
            raise ConfigError(f"{pretrain_only[0]} protects the pre-training sums, which 0-hop "
                              "does not send; use --hops 1 or 2 or drop it")
        if self.encrypt_models:
            if self.algorithm != "fedgcn":
                raise ConfigError("encrypt_models is implemented for --algorithm fedgcn")
            if self.oracle_eval:
                raise ConfigError("encrypt_models keeps the global model encrypted at the server, "
                                  "so the oracle metric cannot score it; add --no-oracle-eval")
            if getattr(self, "checkpoint_every", 0):
                raise ConfigError("encrypt_models cannot checkpoint: the key lives only in client "
                                  "memory, so a resumed run could not decrypt the model; drop "
                                  "--checkpoint-every")

    def _validate_fedgat(self) -> None:
        """FedGAT / GAT options (issue 5): one-line errors naming the fix."""
        self._at_least("degree", 1)
        self._at_least("heads", 1)
        self._at_least("gat_hidden", 1)
        self._at_least("output_heads", 1)
        self._at_least("fedgat_max_degree", 0)
        self._choice("gat_optimizer", ("adam", "sgd"))
        self._choice("gat_features", ("l2", "center-l2", "none"))
        self._choice("fedgat_backend", ("fast", "protocol"))
        self._choice("fedgat_psi", ("leaky_relu", "smooth"))
        self._choice("fedgat_coefficients", ("projection", "interpolation", "lstsq"))
        self._choice("fedgat_basis", ("power", "chebyshev"))
        if self.fedgat_range <= 0:
            raise ConfigError(f"fedgat_range must be > 0 (got {self.fedgat_range}); use e.g. 2")
        if self.fedgat_node_mb <= 0:
            raise ConfigError(f"fedgat_node_mb must be > 0 (got {self.fedgat_node_mb}); use e.g. "
                              "1024, or --fedgat-backend fast")
        if self.vec_fedgat and (self.algorithm != "fedgat" or self.fedgat_backend != "protocol"):
            raise ConfigError("vec_fedgat is a variant of the FedGAT protocol; use --algorithm "
                              "fedgat --fedgat-backend protocol, or drop --vec-fedgat")
        if self.algorithm in GAT_ALGORITHMS:
            if self.model != "gcn":
                raise ConfigError(f"model '{self.model}' applies to the GCN algorithms (fedgcn, "
                                  "centralized); the GAT algorithms are set by --heads, "
                                  "--gat-hidden and --layers; drop --model")
            if self.hops != Config.__dataclass_fields__["hops"].default:
                raise ConfigError("hops is FedGCN's; the GAT algorithms' clients receive the "
                                  "exact neighbourhoods their layers need; drop --hops")
        if self.algorithm == "centralized-gat" and self.checkpoint_every:
            raise ConfigError("checkpoints are for federated runs; drop --checkpoint-every for "
                              "the centralized-gat algorithm")

    def _choice(self, name: str, choices: tuple[str, ...]) -> None:
        value = getattr(self, name)
        if value not in choices:
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown {name} '{value}'{hint}; choose one of {', '.join(choices)}")

    def _at_least(self, name: str, low: int) -> None:
        value = getattr(self, name)
        if value < low:
            raise ConfigError(f"{name} must be >= {low} (got {value})")

    def _check_type(self, name: str, value: Any, annotation: Any) -> None:
        ann = str(annotation)
        optional = "None" in ann
        if value is None:
            if optional:
                return
            raise ConfigError(f"{name} must be set (got null)")
        if ann.startswith("bool"):
            ok = isinstance(value, bool)
        elif ann.startswith("int"):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif ann.startswith("float"):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if ok and not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number (got {value})")
            if ok:
                object.__setattr__(self, name, float(value))
        else:  # str or str | None
            ok = isinstance(value, str)
        if not ok:
            kind = ann.split(" ")[0]
            raise ConfigError(f"{name} must be of type {kind} (got {value!r})")
