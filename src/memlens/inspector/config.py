"""``InspectConfig``: every setting of ``memlens.inspect`` with its default, checked once.

``memlens.inspect(model, every=5, ...)`` maps its keyword arguments onto this dataclass, so
the defaults and the checks live here only. It is frozen and normalised on construction
(``track`` becomes a frozenset of kinds, ``out`` a ``Path``, numbers their types), so the
rest of the inspector reads plain values and never re-validates. No torch here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.errors import MemlensError
from memlens.inspector.alerts import AlertConfig
from memlens.keywords import with_options

KINDS = ("output", "input", "grad_output", "grad_input", "param", "grad")
DEFAULT_TRACK = ("output", "param", "grad")
# Largest tensor copied whole to the CPU, by device type: on the CPU a copy is the whole
# cost, so only small tensors go raw; on an accelerator the reduction there is dearer to
# launch than a modest copy.
RAW_MAX_NUMEL = {"cpu": 1 << 12}
RAW_MAX_NUMEL_DEVICE = 1 << 16

_CHOICES = {
    "backward": ("tensor", "full"),
    "step_on": ("auto", "call", "forward"),
    "render": ("all", "dashboard", "none"),
    "video_format": ("auto", "mp4", "gif"),
}


@dataclass(frozen=True)
class InspectConfig:
    """How an inspection samples, reduces, queues and renders (see ``memlens.inspect``).

    - ``every``: sample one step in ``every`` (steps 0, every, 2*every, ...); None for no
      step-count limit. ``max_per_second``: sample at most that many steps per second.
      With both None every step is sampled.
    - ``out``: the run directory (earlier inspector files in it are replaced).
    - ``track``: any of "output", "input", "grad_output", "grad_input", "param", "grad"
      (parameter gradients), or "all". Default: outputs, parameters and parameter
      gradients ("grad_output" doubles the activation data to reduce; add it when needed).
    - ``backward``: "tensor" takes gradients with tensor hooks on the module's outputs and
      inputs, which is safe with in-place operations after the module; "full" uses
      ``register_full_backward_hook``, which makes PyTorch raise if a hooked module's output
      is later modified in place.
    - ``step_on``: "auto" (each forward call of the model is a step until ``step()`` is first
      called, then only ``step()``), "call" (only ``step()``) or "forward".
    - ``bins``, ``heatmap_size``: histogram bins and heatmap side per sample.
    - ``raw_max_numel``: tensors up to this many elements are copied whole and summarised by
      the background process; None for the per-device default (``raw_max_for``).
    - ``hist_max_numel``: CPU tensors larger than this get their histogram from an evenly
      strided subset of about this many elements (all other statistics stay exact); None
      for exact histograms everywhere. Tensors on an accelerator are always exact.
    - ``chunk_numel``: elements reduced at once on the tensor's device (bounds scratch memory).
    - ``queue_size``, ``max_queue_bytes``: messages and payload bytes in flight to the
      background process; beyond them samples are dropped and counted, never waited for.
    - ``alerts``: thresholds overriding ``alerts.AlertConfig`` (an unknown name is a TypeError).
    - ``video_format`` ("auto", "mp4", "gif"), ``fps``: the videos; ``live_every_s``: how
      often the dashboard is rebuilt while training runs.
    - ``render``: what is rendered when the run ends: "all" (dashboard, PNG plots, videos),
      "dashboard" or "none". ``memlens inspect-report`` rebuilds any of it.
    - ``close_timeout``: seconds ``close()`` waits for the background process.
    - ``nice``: added to the background process's niceness (POSIX), so it gets the CPU time
      training leaves over; 0 to leave it alone.
    """

    every: int | None = 20
    max_per_second: float | None = None
    out: Path = Path("runs/inspect")
    track: frozenset[str] = frozenset(DEFAULT_TRACK)
    backward: str = "tensor"
    step_on: str = "auto"
    bins: int = 64
    heatmap_size: int = 64
    raw_max_numel: int | None = None
    hist_max_numel: int | None = 1 << 14
    chunk_numel: int = 1 << 22
    queue_size: int = 1024
    max_queue_bytes: int = 256 << 20
    alerts: Mapping[str, Any] | None = None
    video_format: str = "auto"
    fps: int = 8
    live_every_s: float = 60.0
    render: str = "all"
    close_timeout: float = 120.0
    nice: int = 10

    def __post_init__(self) -> None:
        every, per_second = self.every, self.max_per_second
        if every is not None and int(every) < 1:
            raise MemlensError("every must be a positive number of steps (or None)")
        if per_second is not None and not per_second > 0:
            raise MemlensError("max_per_second must be positive (or None)")
        if every is None and per_second is None:
            every = 1
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                choices = ", ".join(repr(a) for a in allowed)
                raise MemlensError(f"{name} must be one of {choices}")
        self._set("every", None if every is None else int(every))
        self._set("track", _kinds(self.track))
        self._set("out", Path(os.fspath(self.out)))
        self._set("alerts", dict(self.alerts or {}))
        self.alert_config()  # an unknown threshold name fails now, in the caller
        for name in ("bins", "heatmap_size", "chunk_numel", "queue_size", "max_queue_bytes"):
            self._set(name, int(getattr(self, name)))
        for name in ("fps", "nice"):
            self._set(name, int(getattr(self, name)))
        for name in ("live_every_s", "close_timeout"):
            self._set(name, float(getattr(self, name)))

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # normalising a frozen instance, once

    @classmethod
    def from_options(cls, base: InspectConfig | None, options: Mapping[str, Any]) -> InspectConfig:
        """``base`` (or the defaults) with ``options`` replaced; an unknown name is a TypeError."""
        return with_options(cls, base, options, "memlens.inspect()")

    def alert_config(self) -> AlertConfig:
        return AlertConfig(**(self.alerts or {}))

    def raw_max_for(self, device_type: str) -> int:
        """Largest tensor copied whole from a device of this type."""
        if self.raw_max_numel is not None:
            return self.raw_max_numel
        return RAW_MAX_NUMEL.get(device_type, RAW_MAX_NUMEL_DEVICE)

    def worker_settings(self) -> dict[str, Any]:
        """What the background process needs (a plain dict: it crosses a spawn pipe)."""
        return {
            "out": str(self.out),
            "bins": self.bins,
            "heatmap_size": self.heatmap_size,
            "alerts": dataclasses.asdict(self.alert_config()),
            "video_format": self.video_format,
            "fps": self.fps,
            "live_every_s": self.live_every_s,
            "nice": self.nice,
        }


def _kinds(track: Iterable[str] | str) -> frozenset[str]:
    kinds = KINDS if track == "all" else (track,) if isinstance(track, str) else tuple(track)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise MemlensError(f"track: unknown kind(s) {bad}; choose from {', '.join(KINDS)} or 'all'")
    return frozenset(kinds)
