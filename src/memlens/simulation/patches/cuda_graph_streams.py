"""The streams a CUDA graph's capture holds, after CUDA's stream-capture rules and
CUDAGraph.cpp.

`capture_begin` puts its stream in capture mode. Another stream joins that capture when
it waits on work the capture recorded: `cudaStreamWaitEvent` on an event recorded on a
stream of the capture (`Stream.wait_event`, `Event.wait`, and `Stream.wait_stream`, which
records an event on the other stream and waits on it). From then on
`cudaStreamGetCaptureInfo` on that stream names the capture, and the filter CUDAGraph's
`capture_begin` gives `beginAllocateToPool` (a stream whose capture id is the graph's)
sends its requests to the graph's private pool as well, until `capture_end` (CUDA makes
every joined stream join back into the origin stream before that). An event recorded
outside a capture joins nothing, nor does one whose capture has ended.

FSDP2's all-gather and reduce-scatter streams join this way (they `wait_stream` the
current stream, which is the capture's), so in a captured training step (torchtitan's
default) their buffers come from the graph's pool, as on a GPU, not from the default pool.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from memlens.simulation.patches import cuda_stubs

if TYPE_CHECKING:
    from memlens.analysis.allocator_model import CachingAllocator, PoolId
    from memlens.simulation.patches.fake_cuda import Patches


class Captures:
    """The captures underway in one simulation (an id each, and its pool) and the
    streams each holds."""

    def __init__(self, allocator: CachingAllocator) -> None:
        self.allocator = allocator
        self._ids = itertools.count(1)
        self.pools: dict[int, PoolId] = {}  # capture id -> the pool it allocates into
        self.streams: dict[int, int] = {}  # stream id -> the capture it is part of

    def begin(self, pool: PoolId, stream: int) -> int:
        """capture_begin on `stream`: its requests go to `pool`; the capture's id."""
        self.allocator.begin_allocate_to_pool(pool, stream)
        capture = next(self._ids)
        self.pools[capture] = pool
        self.streams[stream] = capture
        return capture

    def end(self, capture: int) -> None:
        """capture_end: the capture's streams leave it, its pool stays (the graph's)."""
        self.allocator.end_allocate_to_pool(self.pools.pop(capture))
        self.streams = {s: c for s, c in self.streams.items() if c != capture}

    def of(self, stream: int) -> int | None:
        """The capture `stream` is part of now (cudaStreamGetCaptureInfo), if any."""
        return self.streams.get(stream)

    def wait(self, stream: int, capture: int | None) -> None:
        """`stream` waits on work recorded in `capture` (None: outside any): it joins that
        capture if it is still underway and the stream is in none."""
        if capture is None or capture not in self.pools or stream in self.streams:
            return
        self.allocator.join_capture(self.pools[capture], stream)
        self.streams[stream] = capture


def _stream_id(stream: Any) -> int:
    """A stream as code passes it (None: the current one)."""
    return cuda_stubs.current_stream_id() if stream is None else int(stream.stream_id)


def install(patches: Patches, captures: Captures) -> None:
    """Events remember the capture they were recorded in; waits join streams to it."""
    event_class, stream_class = cuda_stubs.Event, cuda_stubs.Stream

    def record(event: Any, stream: Any = None) -> None:
        event.capture = captures.of(_stream_id(stream))

    def event_wait(event: Any, stream: Any = None) -> None:
        captures.wait(_stream_id(stream), getattr(event, "capture", None))

    def wait_event(stream: Any, event: Any) -> None:
        captures.wait(stream.stream_id, getattr(event, "capture", None))

    def wait_stream(stream: Any, other: Any) -> None:
        captures.wait(stream.stream_id, captures.of(_stream_id(other)))

    def record_event(stream: Any, event: Any = None) -> Any:
        event = event if event is not None else event_class()
        event.record(stream)
        return event

    patches.set(event_class, "record", record)
    patches.set(event_class, "wait", event_wait)
    patches.set(stream_class, "wait_event", wait_event)
    patches.set(stream_class, "wait_stream", wait_stream)
    patches.set(stream_class, "record_event", record_event)
    patches.set(stream_class, "is_capturing", lambda s: captures.of(s.stream_id) is not None)
