"""A plain-loop replay of a raw snapshot dict (MemoryViz's rules: `alloc` adds, the
`free_completed` that returns a block subtracts), written without any of memlens's code so
that the tests can hold the analyses against it on the real snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memlens.snapshot.read.safe_pickle import load_plain_pickle


def read_raw(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        raw: dict[str, Any] = load_plain_pickle(f)
        return raw


class HandReplay:
    """One device's trace replayed event by event.

    `allocs`: every allocation made in the trace, as {"addr", "version", "size", "alloc",
    "free" (event index, None when alive at the end), "frames"}; `version` counts the frees
    completed at that address before it (PyTorch's viewer's `addr_version`). Allocations
    older than the trace are the frees without an alloc (alive until that free) and the
    final `active_allocated` blocks the trace never allocated (alive throughout).
    """

    def __init__(self, raw: dict[str, Any], device: int = 0) -> None:
        self.trace = raw["device_traces"][device]
        self.allocs: list[dict[str, Any]] = []
        self.pre_freed: list[tuple[int, int]] = []  # (size, free event)
        open_: dict[int, dict[str, Any]] = {}
        frees_at: dict[int, int] = {}
        deltas = []
        for i, e in enumerate(self.trace):
            action, addr = e["action"], e.get("addr")
            if action == "alloc":
                rec = {"addr": addr, "version": frees_at.get(addr, 0), "size": e["size"],
                       "alloc": i, "free": None, "frames": e.get("frames") or []}  # fmt: skip
                open_[addr] = rec
                self.allocs.append(rec)
                deltas.append(e["size"])
            elif action == "free_completed":
                frees_at[addr] = frees_at.get(addr, 0) + 1
                if addr in open_:
                    rec = open_.pop(addr)
                    rec["free"] = i
                    deltas.append(-rec["size"])
                else:
                    self.pre_freed.append((e["size"], i))
                    deltas.append(-e["size"])
            else:
                deltas.append(0)
        self.pre_blocks = [
            b["requested_size"]
            for seg in raw["segments"]
            if seg.get("device", 0) == device
            for b in seg["blocks"]
            if b["state"] == "active_allocated" and b["address"] not in open_
        ]
        self.baseline = sum(s for s, _ in self.pre_freed) + sum(self.pre_blocks)
        self.active: list[int] = []
        cur = self.baseline
        for d in deltas:
            cur += d
            self.active.append(cur)
        self.times = [e.get("time_us") for e in self.trace]

    def active_at(self, event: int) -> int:
        """Active bytes right after `event` (-1: before the first)."""
        return self.baseline if event < 0 else self.active[event]

    def live_at(self, event: int) -> list[int]:
        """Sizes of everything alive right after `event`."""
        made = [a["size"] for a in self.allocs
                if a["alloc"] <= event and (a["free"] is None or a["free"] > event)]  # fmt: skip
        older = [s for s, f in self.pre_freed if f > event]
        return made + older + self.pre_blocks

    def events_between(self, t0: int, t1: int) -> list[int]:
        """The events of a stage [t0, t1]: t0 < time_us <= t1 (memlens's tie rule)."""
        return [i for i, t in enumerate(self.times) if t0 < t <= t1]

    def last_at_or_before(self, t: int) -> int:
        before = [i for i, ti in enumerate(self.times) if ti <= t]
        return before[-1] if before else -1
