"""Which devices an answer covers: the one asked for, or every device with a trace."""

from __future__ import annotations

from memlens.snapshot.model import Snapshot


def traced_devices(snap: Snapshot, device: int | None = None) -> list[int]:
    """[device] when given; else every device of the snapshot that has a trace (an empty
    trace too), in device order. Devices with segments but no trace are left out: there is
    nothing to replay on them."""
    if device is not None:
        return [device]
    return [d for d in snap.devices if d in snap.traces]
