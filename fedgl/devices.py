"""The torch device a party computes on, checked where it runs.

``cpu`` always works. ``cuda`` / ``cuda:N`` need a CUDA build of torch and a visible GPU (with
index N) on the machine of the party that uses it (the driver, or a Ray actor on a GPU node);
otherwise one :class:`~fedgl.errors.ConfigError` line says what is missing and how to fix it,
instead of a torch traceback from deep inside training.
"""

from __future__ import annotations

import torch

from fedgl.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """``torch.device(name)`` after checking that this machine can use it."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device '{name}' is not a torch device; use cpu or cuda") from None
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        why = ("this torch build has no CUDA support" if torch.version.cuda is None
               else "no CUDA GPU is visible (driver missing or CUDA_VISIBLE_DEVICES empty)")
        raise ConfigError(f"device '{name}' requested, but {why} (torch {torch.__version__}); "
                          "use --device cpu, or run on a machine with a GPU and a CUDA build of "
                          "torch")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ConfigError(f"device '{name}' requested, but this machine has {count} CUDA "
                          f"device(s) (cuda:0..cuda:{count - 1}); pick one of them")
    return device
