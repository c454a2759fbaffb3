"""MEMLENS_READER=both: each snapshot read twice and the two compared, column by column.

memlens has two ways to every snapshot: the compiled reader with the compiled replay (the
default), and the Python reader with the numpy replay (no C compiler at install time, or
MEMLENS_READER=python). They must build the same snapshot to the byte, warn alike and
refuse the same files with the same words. With MEMLENS_READER=both, `memlens.load` builds
it both ways and stops with ReadersDisagree on any difference. The README's test command
runs the suite that way, so every file any test reads is checked on both paths, on the
inputs the tests give it, in one pass (it replaced a second pass that ran the tests again
on the Python path: the simulations, browsers and clusters around the reads ran twice).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from memlens.errors import SnapshotError
from memlens.snapshot.limits import LimitExceeded
from memlens.snapshot.model import Snapshot
from memlens.snapshot.store.cache import DEVICE_ARRAYS, DEVICE_SCALARS

# what the two builds must hold alike beside the columns (the column cache's meta.json)
TABLES = (
    "source",
    "strings",
    "streams",
    "pools",
    "allocator_settings",
    "action_names",
    "warnings",
    "format_notes",
)
SHARED_COLUMNS = ("frames", "stacks", "segments", "annotations")


class ReadersDisagree(AssertionError):
    """The compiled and the Python path built different snapshots from one source: a memlens
    bug. An AssertionError, not a SnapshotError, so that nothing that expects a refusal
    takes it for one."""


def _array_difference(name: str, a: np.ndarray, b: np.ndarray) -> str | None:
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{name}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
    if not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
        first = int(np.flatnonzero(np.ravel(a != b))[0]) if a.ndim else 0
        return f"{name}: differs first at flat index {first}"
    return None


def differences(compiled: Snapshot, python: Snapshot) -> list[str]:
    """What differs between the two builds (empty when they are the same to the byte)."""
    found: list[str] = []
    for name in TABLES:
        if getattr(compiled, name) != getattr(python, name):
            found.append(
                f"{name}: {getattr(compiled, name)!r:.200} vs {getattr(python, name)!r:.200}"
            )
    arrays: list[tuple[str, np.ndarray, np.ndarray]] = []
    for table in SHARED_COLUMNS:
        a, b = getattr(compiled, table), getattr(python, table)
        arrays += [
            (f"{table}.{f.name}", getattr(a, f.name), getattr(b, f.name))
            for f in dataclasses.fields(a)
        ]
    if sorted(compiled.traces) != sorted(python.traces):
        return [*found, f"devices: {sorted(compiled.traces)} vs {sorted(python.traces)}"]
    for device, trace in compiled.traces.items():
        other = python.traces[device]
        found += [
            f"device {device} {name}: {getattr(trace, name)} vs {getattr(other, name)}"
            for name in DEVICE_SCALARS
            if getattr(trace, name) != getattr(other, name)
        ]
        arrays += [
            (f"device {device} {name}", getattr(trace, name), getattr(other, name))
            for name in DEVICE_ARRAYS
        ]
    for name, a, b in arrays:
        diff = _array_difference(name, np.asarray(a), np.asarray(b))
        if diff is not None:
            found.append(diff)
    return found


Outcome = tuple[Snapshot | None, SnapshotError | None]


def outcome(build: Callable[[], Snapshot]) -> Outcome:
    """The snapshot `build` made, or the refusal it raised (anything else propagates)."""
    try:
        return build(), None
    except SnapshotError as exc:
        return None, exc


def check_agreement(name: str, compiled: Outcome, python: Outcome) -> Snapshot:
    """The compiled path's snapshot when both paths agree; its refusal when both refused
    alike; ReadersDisagree otherwise."""
    (snap_c, error_c), (snap_p, error_p) = compiled, python
    if error_c is not None or error_p is not None:
        said = [_said(error_c), _said(error_p)]
        if said[0] != said[1]:
            raise ReadersDisagree(f"{name}: compiled path {said[0]}; Python path {said[1]}")
        assert error_c is not None
        raise error_c
    assert snap_c is not None and snap_p is not None
    found = differences(snap_c, snap_p)
    if found:
        shown = "; ".join(found[:5])
        raise ReadersDisagree(
            f"{name}: the compiled and Python paths built different snapshots "
            f"({len(found)} differences): {shown}"
        )
    return snap_c


def _said(error: Any) -> str:
    if error is None:
        return "built a snapshot"
    if isinstance(error, LimitExceeded):
        # the same limit, figure and advice; what was being read when it was reached (the
        # parenthesis) may differ: the compiled reader counts values as it scans the file,
        # the Python path as it builds (docs/security.md, "One answer from both readers")
        words = str(error).replace(f" ({error.detail})", "", 1) if error.detail else str(error)
        return f"refused it (LimitExceeded: {words})"
    return f"refused it ({type(error).__name__}: {error})"
