"""Keep Ray's start-up notices that ask nothing of a fedgl user off the terminal.

Ray 2.5x logs "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled
to opt out" on every ``ray.init``. Token authentication is the safe default and fedgl keeps it;
the line is noise to someone running a simulation, so it is filtered out. Ray's other warnings
(among them the one that token authentication is *disabled*) still reach the user.
"""

from __future__ import annotations

import logging

#: the logger Ray's token set-up writes to
TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
NOISE = ("Token authentication is enabled for this Ray cluster",)


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(message.startswith(text) for text in NOISE)


_FILTER = _DropNoise()


def quiet_ray_notices() -> None:
    """Install the filter (idempotent; call before ``ray.init``)."""
    logger = logging.getLogger(TOKEN_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
