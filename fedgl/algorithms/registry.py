"""Where algorithm packages register themselves: see :mod:`fedgl.config.registry` (the table of
built-in algorithms, ``BUILTIN``, lives there because the configuration layer needs it)."""

from fedgl.config.registry import AlgorithmSpec, algorithm_names, get_spec, register

__all__ = ["AlgorithmSpec", "algorithm_names", "get_spec", "register"]
