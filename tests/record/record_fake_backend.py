"""A stand-in for TorchCudaBackend, for tests only: it logs every call (in memory, and as JSON
lines to $MEMLENS_FAKE_BACKEND_LOG for subprocess tests) and keeps a tiny allocator whose
snapshots are real dicts in PyTorch's snapshot format, so everything after the dump (files,
loading, summaries) runs for real.

Select it in a subprocess with MEMLENS_RECORD_BACKEND=record_fake_backend:FakeBackend and
this folder on PYTHONPATH; a script reaches it with memlens.capture.backend.get_backend().
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

from memlens.capture.errors import RecordError

SEGMENT_ADDRESS = 0x7F00_0000_0000
SEGMENT_SIZE = 20 * 2**20
TOTAL_MEMORY = 80 * 2**30


class FakeOutOfMemoryError(RuntimeError):
    pass


class FakeBackend:
    def __init__(
        self, *, available: bool = True, history: bool = False, oom_supported: bool = True
    ) -> None:
        self.available = available
        self.history = history  # "other code is recording" before memlens starts
        self.oom_supported = oom_supported
        self.calls: list[tuple[Any, ...]] = []
        self.recording: tuple[int, str, str | None] | None = None
        self.trace: list[dict[str, Any]] = []
        self.blocks: list[list[Any]] = []  # [address, size, live]
        self.segment = False
        self.observers: list[Any] = []
        self.clock = 1_000_000
        self.fail_snapshot: Exception | None = None
        self.log_path = os.environ.get("MEMLENS_FAKE_BACKEND_LOG")

    # -- the Backend protocol -------------------------------------------------------------
    def _log(self, *call: Any) -> None:
        self.calls.append(call)
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(list(call)) + "\n")

    def is_available(self) -> bool:
        return self.available

    def unavailable_reason(self) -> str | None:
        return None

    def history_enabled(self) -> bool:
        return self.history or self.recording is not None

    def start(self, settings: Any) -> None:
        self._log("start", settings.max_entries, settings.stacks, settings.context)
        self.recording = (settings.max_entries, settings.stacks, settings.context)

    def stop(self) -> None:
        self._log("stop")
        self.recording = None
        self.trace = []  # like torch: switching history off clears it

    def snapshot(self) -> dict[str, Any]:
        self._log("snapshot")
        if self.fail_snapshot is not None:
            raise self.fail_snapshot
        return {
            "segments": [self._segment()] if self.segment else [],
            "device_traces": [[dict(e) for e in self.trace]],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
            "external_annotations": [],
        }

    def attach_oom_observer(self, callback: Any) -> None:
        self._log("attach_oom_observer")
        if not self.oom_supported:
            raise RecordError("fake: no out-of-memory observer in this build")
        self.observers.append(callback)

    # -- what test code and test scripts do -------------------------------------------------
    def named_calls(self) -> list[str]:
        return [c[0] for c in self.calls]

    def _event(self, action: str, **fields: Any) -> None:
        self.clock += 10
        if self.recording is None:
            return
        entry = {"action": action, **fields, "stream": 0, "time_us": self.clock}
        entry["frames"] = [{"filename": "train.py", "line": len(self.trace) + 1, "name": "step"}]
        self.trace.append(entry)
        del self.trace[: -self.recording[0]]  # ring buffer of max_entries

    def allocated(self) -> int:
        return sum(size for _, size, live in self.blocks if live)

    def alloc(self, size: int) -> int:
        if not self.segment:
            self.segment = True
            self._event("segment_alloc", addr=SEGMENT_ADDRESS, size=SEGMENT_SIZE)
        addr: int = SEGMENT_ADDRESS + sum(size for _, size, _ in self.blocks)
        if addr + size > SEGMENT_ADDRESS + SEGMENT_SIZE:
            raise ValueError("fake segment is full")
        self.blocks.append([addr, size, True])
        self._event("alloc", addr=addr, size=size)
        return addr

    def free(self, addr: int) -> None:
        block = next(b for b in self.blocks if b[0] == addr and b[2])
        block[2] = False
        self._event("free_requested", addr=addr, size=block[1])
        self._event("free_completed", addr=addr, size=block[1])

    def oom(self, size: int) -> None:
        """What torch does when an allocation fails: record `oom`, call observers, raise."""
        free = TOTAL_MEMORY - SEGMENT_SIZE
        self._event("oom", device_free=free, size=size)
        for observer in self.observers:
            observer(0, size, self.allocated(), free)
        raise FakeOutOfMemoryError(f"fake CUDA out of memory: tried to allocate {size} bytes")

    def _segment(self) -> dict[str, Any]:
        blocks = []
        for addr, size, live in self.blocks:
            state = "active_allocated" if live else "inactive"
            blocks.append(
                {
                    "address": addr,
                    "size": size,
                    "requested_size": size if live else 0,
                    "state": state,
                    "frames": [],
                }
            )
        used = sum(size for _, size, _ in self.blocks)
        if used < SEGMENT_SIZE:
            blocks.append(
                {
                    "address": SEGMENT_ADDRESS + used,
                    "size": SEGMENT_SIZE - used,
                    "requested_size": 0,
                    "state": "inactive",
                    "frames": [],
                }
            )
        allocated = self.allocated()
        return {
            "device": 0,
            "address": SEGMENT_ADDRESS,
            "total_size": SEGMENT_SIZE,
            "allocated_size": allocated,
            "active_size": allocated,
            "requested_size": allocated,
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": (0, 0),
            "is_expandable": False,
            "frames": [],
            "blocks": blocks,
        }


def read_snapshot_file(path: Path) -> dict[str, Any]:
    """Tests may unpickle what memlens wrote from a fake (src/ never unpickles by hand)."""
    data = Path(path).read_bytes()
    assert data[:2] == b"\x80\x04", "snapshot must be pickle protocol 4"
    snapshot: dict[str, Any] = pickle.loads(data)
    return snapshot
