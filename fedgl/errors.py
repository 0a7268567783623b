"""User-facing errors.

Every problem caused by the user's input (a config value, a CLI flag, a data file, a graph that
cannot be split) raises a :class:`FedglError`. The CLI turns it into one line on stderr and exit
code 2; the Python API lets it propagate so callers can catch it.
"""

from __future__ import annotations


class FedglError(Exception):
    """Base class for errors caused by bad user input. The message names the problem and the fix."""


class ConfigError(FedglError):
    """An invalid configuration value, key, or file."""


class DataError(FedglError):
    """A dataset that is missing, corrupt, or cannot be partitioned as asked."""


class PluginError(ConfigError):
    """A third-party algorithm plugin (entry point group ``fedgl.algorithms``) that cannot be
    used: it fails to import, clashes with a built-in name, or declares a bad spec. The message
    names the plugin, its package and the fix."""


class MissingExtraError(FedglError):
    """A feature needs an optional dependency that is not installed; the message names the extra
    and the install command (e.g. ``pip install 'fedgl[ray]'``)."""


class OutputError(FedglError):
    """The results folder cannot be used: in use by another run, already holding results, not
    writable, or the disk is full."""


class DivergenceError(FedglError):
    """Training produced a non-finite loss or model (the message names the round and the fix;
    ``--allow-divergence`` records it in the result instead)."""


class RunAborted(Exception):
    """A run stopped by its failure policy (e.g. a client died under ``abort``). Not a user-input
    error: the CLI reports it in one line with exit code 1."""


class ServerInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) on ``fedgl server`` once it submitted a run: ``superlink``
    says what became of that run on the SuperLink (stopped, or the ``flwr stop`` to run), the
    clause the CLI's one line ends with."""

    def __init__(self, superlink: str) -> None:
        super().__init__(superlink)
        self.superlink = superlink
