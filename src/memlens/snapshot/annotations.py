"""external_annotations as columns: the `Annotations` table and the one function that builds
it from PyTorch's entries, used both by a load (builder) and by
`Snapshot.add_annotations` (annotations from another tool of the same run)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from memlens.errors import SnapshotError


@dataclass
class Annotations:
    """external_annotations as columns (START/END markers from record_function)."""

    name: np.ndarray  # int32 string id
    stage: np.ndarray  # int8: 0 START, 1 END, -1 other
    device: np.ndarray  # int32
    time_us: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.name)


_STAGES = {"START": 0, "END": 1}


def annotation_columns(raw: Any, intern: Callable[[Any], int]) -> Annotations:
    """external_annotations entries ({"name", "stage", "device", "time_us"}) as columns;
    `intern` maps a name to its id in the snapshot's string table (called once per
    distinct name, in order of first use). Column at a time: a long training run records
    hundreds of thousands of them."""
    entries = [a for a in raw if isinstance(a, dict)] if isinstance(raw, list) else []
    names = [a.get("name", "") for a in entries]
    if set(map(type, names)) <= {str}:
        ids = {name: intern(name) for name in dict.fromkeys(names)}
        name_ids = [ids[name] for name in names]
    else:  # not text: never hashed (a shared-tuple bomb), interned one by one, bounded
        name_ids = [intern(name) for name in names]
    stage_of = _STAGES.get
    stages = [stage_of(st, -1) if type(st := a.get("stage")) is str else -1 for a in entries]
    devices = [a.get("device", 0) or 0 for a in entries]
    times = [a.get("time_us", -1) for a in entries]
    return Annotations(
        name=np.asarray(name_ids, dtype=np.int32),
        stage=np.asarray(stages, dtype=np.int8),
        device=_int_column(devices, np.int32),
        time_us=_int_column(times, np.int64),
    )


def _int_column(values: list[Any], dtype: Any) -> np.ndarray:
    if set(map(type, values)) <= {int}:
        try:
            return np.fromiter(values, dtype=dtype, count=len(values))
        except OverflowError:
            pass
    try:
        return np.asarray([int(v) for v in values], dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        raise SnapshotError("an external annotation has a non-integer device or time_us") from None
