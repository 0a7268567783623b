"""One validated configuration: common sections (data, federation, model, optim, experiment,
runtime, privacy, output) plus the chosen algorithm's own options, which each algorithm declares
next to its code and registers in :mod:`fedgl.config.registry`."""

from fedgl.config.fields import option, parse_num_neighbors
from fedgl.config.registry import AlgorithmSpec, algorithm_names, get_spec, register
from fedgl.config.schema import COMMON_KEYS, Config
from fedgl.config.sections import (
    SECTIONS,
    DataConfig,
    ExperimentConfig,
    FederationConfig,
    ModelConfig,
    OptimConfig,
    OutputConfig,
    PrivacyConfig,
    RuntimeConfig,
    parse_bandwidth,
    parse_latency,
)

__all__ = ["COMMON_KEYS", "SECTIONS", "AlgorithmSpec", "Config", "DataConfig",
           "ExperimentConfig", "FederationConfig", "ModelConfig", "OptimConfig", "OutputConfig",
           "PrivacyConfig", "RuntimeConfig", "algorithm_names", "get_spec", "option",
           "parse_bandwidth", "parse_latency", "parse_num_neighbors", "register"]
