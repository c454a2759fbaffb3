"""Stand-ins for torch.cuda objects a CPU-only build cannot create (device properties,
events, streams, NVTX). Streams are ids the allocator's pools are keyed by; nothing ever
runs on them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the card is handed in by the session, which owns the simulation's settings
    from memlens.simulation.gpus import Gpu


class DeviceProperties:
    """What torch.cuda.get_device_properties answers (from the --gpu preset)."""

    def __init__(self, gpu: Gpu, total_memory: int):
        self.name = gpu.name
        self.total_memory = total_memory
        self.major, self.minor = gpu.capability
        self.multi_processor_count = gpu.multiprocessors
        self.L2_cache_size = gpu.l2_cache  # noqa: N815 (torch's attribute name)
        self.is_integrated = False


class Nvtx:
    """Stands in for torch.cuda.nvtx's compiled `_nvtx` (absent from CPU-only builds).

    torch.cuda.nvtx.range / range_push / range_pop / range_start / range_end / mark all
    call it; ranges become annotations, as record_function's do (`annotate(name, stage)`,
    None to keep them out of the snapshot). Nothing runs, so marks are dropped.
    """

    def __init__(self, annotate: Callable[[str, str], None] | None):
        self._annotate = annotate
        self._stack: list[str] = []
        self._open: dict[int, str] = {}
        self._next_id = 1

    def _emit(self, name: str, stage: str) -> None:
        if self._annotate is not None:
            self._annotate(name, stage)

    def rangePushA(self, msg: str) -> int:  # noqa: N802 (the compiled module's names)
        self._stack.append(msg)
        self._emit(msg, "START")
        return len(self._stack) - 1

    def rangePop(self) -> int:  # noqa: N802
        if not self._stack:
            return -1
        self._emit(self._stack.pop(), "END")
        return len(self._stack)

    def rangeStartA(self, msg: str) -> int:  # noqa: N802
        range_id, self._next_id = self._next_id, self._next_id + 1
        self._open[range_id] = msg
        self._emit(msg, "START")
        return range_id

    def rangeEnd(self, range_id: int) -> None:  # noqa: N802
        name = self._open.pop(range_id, None)
        if name is not None:
            self._emit(name, "END")

    def markA(self, msg: str) -> None:  # noqa: N802
        pass

    def deviceRangeStart(self, msg: str, stream: int = 0) -> object:  # noqa: N802
        return self.rangeStartA(msg)

    def deviceRangeEnd(self, handle: object, stream: int = 0) -> None:  # noqa: N802
        if isinstance(handle, int):
            self.rangeEnd(handle)


def memory_stats(
    allocated: int, reserved: int, peak_allocated: int, peak_reserved: int
) -> dict[str, int]:
    """The torch.cuda.memory_stats() keys scripts read most (byte counts, pool 'all')."""
    stats = {}
    for metric, current, peak in (
        ("allocated_bytes", allocated, peak_allocated),
        ("active_bytes", allocated, peak_allocated),
        ("reserved_bytes", reserved, peak_reserved),
    ):
        for pool in ("all", "large_pool", "small_pool"):
            both = pool == "all"
            stats[f"{metric}.{pool}.current"] = current if both else 0
            stats[f"{metric}.{pool}.peak"] = peak if both else 0
    return stats


class Event:
    """torch.cuda.Event for timing code: nothing runs, so every interval is 0 ms."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ):
        pass

    def record(self, stream: object = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, stream: object = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: object) -> float:
        return 0.0


class Stream:
    """torch.cuda.Stream: an id the allocator keys its free blocks by (a block freed on
    a side stream is reused by that stream's allocations only, as CUDACachingAllocator
    does). Nothing runs, so every wait and event is complete at once. The default
    stream is 0; `torch.cuda.Stream()` makes the next id."""

    device_index = 0
    device_type = 1  # c10::DeviceType::CUDA
    device = torch.device("cuda", 0)
    made = 0  # side streams made so far in this simulation

    def __init__(self, device: object = None, priority: int = 0, **kwargs: object) -> None:
        Stream.made += 1
        self.stream_id = self.cuda_stream = Stream.made

    @classmethod
    def of(cls, stream_id: int) -> Stream:
        """The stream with this id (0: the default stream), without making a new one."""
        stream = cls.__new__(cls)
        stream.stream_id = stream.cuda_stream = stream_id
        return stream

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(("stream", self.stream_id))

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream: object) -> None:
        pass

    def wait_event(self, event: object) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        return event or Event()

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:  # optimizers ask; cuda_graph_streams.py answers
        return False

    def __enter__(self) -> Stream:
        # torch.Stream as a context manager: the current stream until the block ends
        self._previous = current_stream_id()
        set_stream(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _Current.stream = self._previous
        return None  # exceptions propagate


class _Current:
    stream = 0  # the id of the stream allocations go to (set_stream, torch.cuda.stream)


def current_stream_id() -> int:
    return _Current.stream


def set_stream(stream: Stream | None) -> None:
    """torch.cuda.set_stream; None leaves the current stream as it is."""
    if stream is not None:
        _Current.stream = stream.stream_id


def reset_streams() -> None:
    """A new simulation starts on the default stream, with no side streams made."""
    _Current.stream = 0
    Stream.made = 0


class StreamContext:
    """torch.cuda.stream(s) / StreamContext: `s` current inside the block (no-op for
    None), the previous stream back after it."""

    def __init__(self, stream: Stream | None) -> None:
        self.stream = stream
        self.previous = 0

    def __enter__(self) -> Stream | None:
        self.previous = current_stream_id()
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        _Current.stream = self.previous
        return None  # exceptions propagate


class ExternalStream(Stream):
    """torch.cuda.ExternalStream: a stream made elsewhere, taken as the default stream."""

    def __init__(self, stream_ptr: int = 0, device: object = None, **kwargs: object) -> None:
        self.stream_id = 0
        self.cuda_stream = stream_ptr
