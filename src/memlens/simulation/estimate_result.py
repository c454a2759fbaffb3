"""What `memlens.estimate(...)` answers: the peaks, the bytes by category at the peak, and
whether it fits a card. No torch here: the breakdown is read from the snapshot the
simulation produced, through the same analysis `memlens categories` runs.

The breakdown is taken at the first event where active bytes reach their peak. Its rows
sum to the peak active bytes, and `cache` (reserved minus active at that event: what the
caching allocator holds free) brings them to the reserved bytes at that event, which may
be below the peak reserved (reserved can peak elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memlens.errors import MemlensError
from memlens.simulation.gpus import GENERATIONS, GPUS, gpu_preset
from memlens.units import format_bytes, parse_bytes

# The rows of Estimate.breakdown, in order: analysis.categories' categories with the
# cuBLAS workspaces taken out of them, then the allocator's cache.
PARAMETERS, GRADIENTS, OPTIMIZER_STATE, ACTIVATIONS = (
    "parameters", "gradients", "optimizer_state", "activations",
)  # fmt: skip
BREAKDOWN_ROWS: tuple[str, ...] = (
    PARAMETERS, GRADIENTS, OPTIMIZER_STATE, ACTIVATIONS,
    "temporary", "autograd", "other", "workspaces", "cache",
)  # fmt: skip
# analysis.categories' names -> the breakdown's
_ROW_OF = {
    "parameter": PARAMETERS,
    "gradient": GRADIENTS,
    "optimizer_state": OPTIMIZER_STATE,
    "activation": ACTIVATIONS,
}


def breakdown(snapshot: dict[str, Any], workspaces: Sequence[int]) -> dict[str, int]:
    """Bytes per row of BREAKDOWN_ROWS at the active peak of `snapshot`; `workspaces` are
    the addresses of the cuBLAS workspaces (the simulation knows them; their stacks are
    the first GEMM's, which no frame pattern can tell from the GEMM's output)."""
    import numpy as np

    from memlens.analysis.categories import categorize
    from memlens.snapshot.loader import load

    dev = load(snapshot, warn=False).device(0)
    cat, names = categorize(dev)
    event = dev.peak_event_index
    live = dev.live_at(event)
    rows = {name: 0 for name in BREAKDOWN_ROWS}
    is_workspace = np.isin(dev.alloc_addr[live], np.asarray(workspaces, dtype=np.uint64))
    for row, ws in zip(live.tolist(), is_workspace.tolist(), strict=True):
        name = "workspaces" if ws else _ROW_OF.get(names[cat[row]], names[cat[row]])
        rows[name] += int(dev.alloc_size[row])
    rows["cache"] = dev.reserved_at(event) - dev.active_at(event)
    return rows


def capacity_of(card: str | int) -> tuple[int, str]:
    """(bytes, name) of a card preset ("rtx4090", "a100", "hopper") or a size ("24GiB",
    an int of bytes). A card's bytes are its total as nvidia-smi reports it: the CUDA
    context takes a few hundred MiB of that on a real card."""
    if isinstance(card, str):
        key = card.strip().lower().replace(" ", "")
        if key in GPUS or key in GENERATIONS:
            gpu = gpu_preset(key)
            return gpu.memory, gpu.key
    try:
        size = parse_bytes(card)
    except MemlensError:
        known = ", ".join([*GPUS, *GENERATIONS])
        raise MemlensError(f"fits({card!r}): a card ({known}) or a size such as 24GiB") from None
    if size <= 0:
        raise MemlensError(f"fits({card!r}): the capacity must be positive")
    return size, format_bytes(size)


@dataclass(frozen=True)
class Fit:
    """Whether the run fits `capacity` bytes, and by how much.

    `needed` is the peak reserved bytes of the run that decided (what the allocator
    holds from the device at its highest); `margin` = capacity - needed (negative: short
    by that much). `how` says how it was decided (see Estimate.fits)."""

    fits: bool
    card: str
    capacity: int
    needed: int
    how: str

    @property
    def margin(self) -> int:
        return self.capacity - self.needed

    def __bool__(self) -> bool:
        return self.fits

    def line(self) -> str:
        verdict = "fits" if self.fits else "does not fit"
        side = "headroom" if self.margin >= 0 else "short by"
        return (
            f"{self.card} ({format_bytes(self.capacity)}): {verdict}, {side} "
            f"{format_bytes(abs(self.margin))} ({self.how})"
        )


# Reruns the estimate with the device memory limited to the given bytes: (OOM message or
# None, peak reserved bytes of that run).
Rerun = Callable[[int], tuple[str | None, int]]


@dataclass(frozen=True)
class Estimate:
    """The memory one configuration needs, from its simulation.

    `snapshot` is the simulated run's memory snapshot (every memlens command reads it:
    `memlens.load(est.snapshot)`); `breakdown` is bytes per row of BREAKDOWN_ROWS at the
    active peak; `notes` the approximate paths the simulation took; `wrapped` what the
    world/sharding did (the `fsdp2=`/`ddp=` knob's line), None on one GPU."""

    peak_active_bytes: int
    peak_reserved_bytes: int
    breakdown: dict[str, int]
    snapshot: dict[str, Any] = field(repr=False)
    gpu: str
    world: int = 1
    sharding: str | None = None
    wrapped: str | None = None
    oom: str | None = None
    notes: list[str] = field(default_factory=list)
    rerun: Rerun | None = field(default=None, repr=False, compare=False)

    def fits(self, card: str | int | None = None) -> Fit:
        """Does it fit `card` (a preset name or a size; default: the simulated `gpu`)?

        Exact in every case: a run whose peak reserved bytes fit never reached the limit,
        so it runs the same on the card (fits); one whose peak active bytes exceed it
        cannot fit (does not fit); in between the caching allocator frees its cache and
        retries, and fragmentation decides, so the run is simulated again with the
        device memory limited to the card's (fits when it completes)."""
        capacity, name = capacity_of(self.gpu if card is None else card)
        if self.oom is not None:  # the estimate's own run stopped (it has no limit)
            return Fit(False, name, capacity, self.peak_reserved_bytes, "the run ran out")
        if self.peak_reserved_bytes <= capacity:
            return Fit(True, name, capacity, self.peak_reserved_bytes, "peak reserved fits")
        if self.peak_active_bytes > capacity or self.rerun is None:
            how = "peak active exceeds it" if self.peak_active_bytes > capacity else "no rerun"
            return Fit(False, name, capacity, self.peak_reserved_bytes, how)
        oom, reserved = self.rerun(capacity)
        if oom is not None:
            return Fit(False, name, capacity, self.peak_reserved_bytes, "OOM when limited to it")
        return Fit(True, name, capacity, reserved, "completed when limited to it")

    def summary(self) -> str:
        """Two lines: the peaks, then the breakdown at the active peak."""
        parts = ", ".join(f"{name} {format_bytes(b)}" for name, b in self.breakdown.items() if b)
        return (
            f"peak active {format_bytes(self.peak_active_bytes)}, peak reserved "
            f"{format_bytes(self.peak_reserved_bytes)}\nat the active peak: {parts}"
        )
