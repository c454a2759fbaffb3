"""Checks on values read from an untrusted snapshot: integers where integers belong, within
bounds, and byte sizes that can never overflow a running total. Each failure is a
SnapshotError naming the field and a bounded glimpse of the bad value. Used by the builder
and by the compiled reader's Python side, so both paths refuse the same inputs alike."""

from __future__ import annotations

from typing import Any

import numpy as np

from memlens.errors import SnapshotError

# Largest byte count accepted in any size field: 8 PiB is far beyond any device, and 2^53 is
# where the viewer's JavaScript numbers stop being exact. A size past it, or a negative
# one, is an error, never a figure.
MAX_SIZE = 1 << 53
# Sums of sizes stay below this, so no running total (int64 cumsum) can overflow.
MAX_TOTAL = 1 << 62
INT64 = (-(1 << 63), (1 << 63) - 1)
UINT64 = (0, (1 << 64) - 1)
SIZE = (0, MAX_SIZE)


def checked_int(value: Any, what: str, bounds: tuple[int, int]) -> int:
    """An integer field read from the snapshot: ints (and bools) only, within `bounds`."""
    if not isinstance(value, int):
        raise SnapshotError(
            f"{what} is a {type(value).__name__} ({glimpse(value)}), expected an integer"
        )
    lo, hi = bounds
    if not lo <= value <= hi:
        raise SnapshotError(f"{what} is out of range ({glimpse(value)}; allowed {lo}..{hi})")
    return int(value)


def first_bad(values: list[Any], kind: type | tuple[type, ...]) -> tuple[int, Any] | None:
    """The first (index, value) not of `kind` (subclasses such as bool count as their base);
    a set of types first, so the usual all-good column costs one C-speed pass."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if set(map(type, values)) <= set(kinds):
        return None
    return next(((i, v) for i, v in enumerate(values) if not isinstance(v, kinds)), None)


def glimpse(value: Any) -> str:
    """A bounded, printable glimpse of a bad value for an error message."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (
            str(value) if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"
        )
    if isinstance(value, (str, bytes)):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, (list, tuple, dict)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


def check_sizes(size: np.ndarray, what: str, field: str) -> None:
    """Sizes are bytes: never negative, never past MAX_SIZE, and their sum fits int64."""
    if not len(size):
        return
    lo, hi = int(size.min()), int(size.max())
    if lo < 0 or hi > MAX_SIZE:
        i = int(np.argmin(size)) if lo < 0 else int(np.argmax(size))
        raise SnapshotError(f"{what} {i}: {field} {int(size[i])} is out of range (0..{MAX_SIZE})")
    check_total(size, f"{what} {field}s")


def check_total(values: Any, what: str) -> None:
    values = np.asarray(values)
    # no sum needed when even every value at the largest could not reach the limit
    if (
        values.dtype.kind in "iu"
        and len(values)
        and int(values.max()) * len(values) < MAX_TOTAL
        and int(values.min()) >= 0
    ):
        return
    if float(np.sum(np.asarray(values, dtype=np.float64))) >= MAX_TOTAL:
        raise SnapshotError(f"{what} add up past 2^62 bytes: not a real snapshot")
