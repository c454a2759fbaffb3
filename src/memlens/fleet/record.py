"""The per-rank task: one snapshot file in, one small RankRecord out.

Only records travel back to the parent (or the Dask client), never columns: a record is
a few kilobytes whatever the size of the file, so the parent's memory does not grow with
the ranks' sizes, and a worker holds one snapshot at a time.

Every figure is the one `memlens summary --json` prints for that file and device (the
same function computes them), so a fleet row and a summary agree to the byte.
"""

from __future__ import annotations

import hashlib
import os
import socket
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from memlens.analysis.categories import categorize
from memlens.analysis.matching import key_text, site_key
from memlens.analysis.results import OomEntry, Site
from memlens.analysis.sites import user_frame_of_stacks
from memlens.analysis.stages import stage_table
from memlens.snapshot.model import DeviceTrace

OK, FAILED = "ok", "failed"

# The figures a row carries that `memlens summary --json` also gives (same names).
SUMMARY_FIGURES = (
    "trace_entries",
    "baseline_bytes",
    "peak_active_bytes",
    "peak_event_index",
    "peak_time_us",
    "end_active_bytes",
    "peak_reserved_bytes",
    "peak_reserved_event_index",
    "end_reserved_bytes",
)


@dataclass
class RankRecord:
    """One rank's figures (status "ok") or why it has none (status "failed")."""

    rank: int
    path: str
    status: str = OK
    reason: str | None = None  # one line, for a failed row
    device: int | None = None
    trace_entries: int = 0
    baseline_bytes: int = 0
    peak_active_bytes: int = 0
    peak_event_index: int = -1
    peak_time_us: int | None = None
    end_active_bytes: int = 0
    peak_reserved_bytes: int = 0
    peak_reserved_event_index: int = -1
    end_reserved_bytes: int = 0
    ooms: list[OomEntry] = field(default_factory=list)
    # stage base name ("forward", "ProfilerStep", ...) -> highest peak over its occurrences
    stage_peaks: dict[str, int] = field(default_factory=dict)
    # category (memlens categories) -> bytes live at the peak of active memory
    category_bytes: dict[str, int] = field(default_factory=dict)
    top_sites: list[Site] = field(default_factory=list)
    # hash of the set of call sites that allocated on this device: same code, same hash
    fingerprint: str = ""
    worker: str = ""  # host:pid that read the file (which worker to look at)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def one_line(exc: BaseException) -> str:
    """An exception as the one-line reason of a failed row."""
    from memlens.errors import MemlensError

    if isinstance(exc, MemlensError):
        text = str(exc)
    elif isinstance(exc, OSError):
        text = f"cannot read it: {exc.strerror or exc}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split()) or type(exc).__name__


def rank_record(
    path: str,
    rank: int,
    *,
    device: int | None = None,
    top: int = 10,
    hide_patterns: Sequence[str] | None = None,
    cache: bool = True,
) -> RankRecord:
    """Load `path` (through the column cache) and reduce it to a RankRecord. Never raises
    for a bad file: the record is then a failed row with a one-line reason."""
    from memlens.snapshot.loader import load

    try:
        with warnings.catch_warnings():
            # a worker's stderr is no place for them (a cache that cannot be written, a
            # rebuilt entry): the file's own warnings stay on the snapshot
            warnings.simplefilter("ignore")
            snap = load(path, cache=cache, warn=False)
            dev = snap.device(device)
            return record_of(dev, path, rank, top=top, hide_patterns=hide_patterns)
    except Exception as exc:  # every failure is a row: the other ranks go on
        return RankRecord(
            rank=rank,
            path=path,
            status=FAILED,
            reason=one_line(exc),
            device=device,
            worker=worker_name(),
        )


def record_of(
    dev: DeviceTrace,
    path: str,
    rank: int,
    *,
    top: int = 10,
    hide_patterns: Sequence[str] | None = None,
) -> RankRecord:
    """The record of one loaded device trace."""
    from memlens.analysis.summary import device_summary

    s = device_summary(dev, top=top, hide_patterns=hide_patterns)
    figures: Mapping[str, Any] = s  # (read by name from SUMMARY_FIGURES)
    return RankRecord(
        rank=rank,
        path=path,
        device=dev.device,
        **{k: figures[k] for k in SUMMARY_FIGURES},
        ooms=s["ooms"],
        stage_peaks=stage_peaks(dev),
        category_bytes=category_bytes_at_peak(dev),
        top_sites=s["top_sites"],
        fingerprint=stack_fingerprint(dev, hide_patterns),
        worker=worker_name(),
    )


def stage_peaks(dev: DeviceTrace) -> dict[str, int]:
    """Highest peak of each stage base name (all occurrences of "ProfilerStep#N" are one
    stage: ranks run different step numbers but the same stages)."""
    out: dict[str, int] = {}
    for s in stage_table(dev, top=0)["stages"]:
        name = s["base_name"]
        out[name] = max(out.get(name, 0), int(s["peak_bytes"]))
    return out


def category_bytes_at_peak(dev: DeviceTrace) -> dict[str, int]:
    """Bytes per category live at the peak (what `memlens categories` gives at the peak)."""
    cat, names = categorize(dev)
    rows = dev.live_at(dev.peak_event_index)
    sums = np.bincount(cat[rows], weights=dev.alloc_size[rows], minlength=len(names))
    # float64 weights: exact below 2**53 bytes
    return {name: int(b) for name, b in zip(names, sums.tolist())}


def stack_fingerprint(dev: DeviceTrace, hide_patterns: Sequence[str] | None = None) -> str:
    """16 hex digits naming the set of call sites (first user frames) that allocated on
    this device. Ranks running the same code share it whatever their sizes or timing."""
    snap = dev.snapshot
    stacks = np.unique(np.asarray(dev.alloc_stack))
    stacks = stacks[stacks >= 0]
    sites = np.unique(user_frame_of_stacks(snap, hide_patterns)[stacks])
    # machine-independent keys: ranks on hosts with other install/project paths agree
    labels = sorted({key_text(site_key(snap, int(f))) for f in sites.tolist()})
    # a name may hold a lone surrogate (pickle allows it): hashed as its bytes, not refused
    return hashlib.sha256("\n".join(labels).encode("utf-8", "surrogatepass")).hexdigest()[:16]
