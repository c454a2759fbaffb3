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


def annotation_columns(raw: Any, intern: Callable[[Any], int]) -> Annotations:
    """external_annotations entries ({"name", "stage", "device", "time_us"}) as columns;
    `intern` maps a name to its id in the snapshot's string table."""
    names, stages, devices, times = [], [], [], []
    if not isinstance(raw, list):
        raw = []
    for a in raw:
        if not isinstance(a, dict):
            continue
        names.append(intern(a.get("name", "")))
        st = a.get("stage")
        stages.append(0 if st == "START" else 1 if st == "END" else -1)
        try:
            devices.append(int(a.get("device", 0) or 0))
            times.append(int(a.get("time_us", -1)))
        except (TypeError, ValueError):
            raise SnapshotError(
                "an external annotation has a non-integer device or time_us"
            ) from None
    return Annotations(
        name=np.asarray(names, dtype=np.int32),
        stage=np.asarray(stages, dtype=np.int8),
        device=np.asarray(devices, dtype=np.int32),
        time_us=np.asarray(times, dtype=np.int64),
    )
