"""`python -m torchtitan.train`, unedited, on torch 2.13 as on 2.14 and later.

torchtitan 0.3.0 calls `torch.distributed.set_timeout` (new in torch 2.14) after its first
training step, to shorten the process groups' timeouts; torch 2.13 has no such function
and the run would stop there with AttributeError. A timeout changes no memory, so on a
torch without it this gives it a no-op, then runs torchtitan's own entry point with the
command line as given. On torch 2.14 and later it adds nothing.
"""

from __future__ import annotations

import runpy
from datetime import timedelta
from typing import Any

import torch.distributed as dist


def _set_timeout(timeout: timedelta, group: Any = None) -> None:
    """torch 2.14's set_timeout, as nothing: timeouts have no memory."""


if not hasattr(dist, "set_timeout"):
    dist.set_timeout = _set_timeout  # type: ignore[attr-defined]
runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
