"""`%%memlens simulate --device-memory SIZE`'s verdict: does the cell fit the card, and by
how much. Fits means the simulated allocator never ran out: its peak reserved (what it
took from the card) stayed within SIZE; the margin is SIZE minus that peak."""

from __future__ import annotations

from pathlib import Path

from memlens.units import format_bytes, parse_bytes


def fits_verdict(path: Path, device_memory: str, *, ran_out: bool) -> str:
    """One line: `memlens: fits in 24.00 GiB: peak reserved 1.02 GiB, 22.98 GiB to spare
    (peak active 0.98 GiB)`, or that it does not fit (the cell ran out of memory)."""
    from memlens.snapshot.loader import load

    total = parse_bytes(device_memory)
    dev = load(path, warn=False).device(0)
    reserved, active = dev.peak_reserved_bytes, dev.peak_active_bytes
    spare = total - reserved
    if ran_out or spare < 0:
        return (
            f"memlens: does not fit in {format_bytes(total)}: the cell ran out of memory "
            f"(peak reserved {format_bytes(reserved)} before it)"
        )
    return (
        f"memlens: fits in {format_bytes(total)}: peak reserved {format_bytes(reserved)}, "
        f"{format_bytes(spare)} to spare (peak active {format_bytes(active)})"
    )
