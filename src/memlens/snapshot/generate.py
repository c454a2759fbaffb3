"""Generate snapshots in PyTorch's exact format, of any size, with realistic structure.

Real snapshots cannot ship with memlens, so tests, benchmarks and the README example use
these. The generator runs a small model of the CUDA caching allocator (512-byte rounding,
small 2 MiB and large 20 MiB / rounded segments, best-fit reuse per stream and pool,
splitting and coalescing of blocks) under a training loop: parameters that existed before
recording (blocks with no trace event), forward activations kept for backward,
temporaries, gradients, AdamW state created on the first step, `record_stream` frees that
complete late on a side stream, and record_function annotations (ProfilerStep#N, forward,
backward, Optimizer.step#AdamW.step, Optimizer.zero_grad#AdamW.zero_grad). Frame dicts
and stack lists are shared objects, as in PyTorch's pickles, so files stay small.

Options add truncated traces (ring buffer eviction), several devices, expandable
segments (segment_map instead of segment_alloc) and an OOM entry. The final `segments`
always match the end of the trace exactly, so memlens's replay invariant holds.
"""

from __future__ import annotations

import bisect
import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KB, MB = 1024, 1024 * 1024
SMALL_SIZE = 1 * MB  # requests up to this go to the small pool
SMALL_SEGMENT = 2 * MB
LARGE_SEGMENT = 20 * MB
MIN_LARGE_ALLOC = 10 * MB
ROUND_LARGE = 2 * MB
MIN_BLOCK = 512
EXPANDABLE_GRANULE = 20 * MB


def round_size(n: int) -> int:
    return max(MIN_BLOCK, (n + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK)


def segment_size_for(rounded: int) -> int:
    if rounded <= SMALL_SIZE:
        return SMALL_SEGMENT
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return (rounded + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


@dataclass
class _Block:
    addr: int
    size: int
    seg: _Segment
    requested: int = 0
    state: str = "inactive"
    frames: list = field(default_factory=list)
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class _Segment:
    addr: int
    size: int
    small: bool
    stream: int
    frames: list
    expandable: bool = False
    head: _Block | None = None


class _Allocator:
    """Just enough of c10's CUDACachingAllocator to produce consistent traces."""

    def __init__(self, device: int, base: int, trace: list, clock, expandable: bool) -> None:
        self.device = device
        self.next_va = base
        self.trace = trace
        self.clock = clock
        self.expandable = expandable
        self.segments: list[_Segment] = []
        self.pools: dict[tuple[bool, int], list[tuple[int, int, _Block]]] = {}
        self.blocks: dict[int, _Block] = {}
        self.record = True

    def _event(self, action: str, addr: int, size: int, stream: int, frames: list) -> None:
        if self.record:
            self.trace.append(
                {"action": action, "addr": addr, "size": size, "stream": stream,
                 "time_us": self.clock(), "frames": frames,
                 "compile_context": "N/A", "user_metadata": ""}
            )  # fmt: skip

    def _pool(self, small: bool, stream: int) -> list:
        return self.pools.setdefault((small, stream), [])

    def _add_free(self, b: _Block) -> None:
        b.state = "inactive"
        b.frames = []
        bisect.insort(self._pool(b.seg.small, b.seg.stream), (b.size, b.addr, b))

    def _remove_free(self, b: _Block) -> None:
        pool = self._pool(b.seg.small, b.seg.stream)
        i = bisect.bisect_left(pool, (b.size, b.addr))
        while pool[i][2] is not b:
            i += 1
        pool.pop(i)

    def _new_segment(self, small: bool, stream: int, rounded: int, frames: list) -> _Block:
        size = segment_size_for(rounded)
        if self.expandable and not small:
            size = (rounded + EXPANDABLE_GRANULE - 1) // EXPANDABLE_GRANULE * EXPANDABLE_GRANULE
        seg = _Segment(
            self.next_va, size, small, stream, frames, expandable=self.expandable and not small
        )
        self.next_va += size + 2 * MB  # keep segments apart so nothing looks contiguous
        blk = _Block(seg.addr, size, seg)
        seg.head = blk
        self.segments.append(seg)
        self._event(
            "segment_map" if seg.expandable else "segment_alloc", seg.addr, size, stream, frames
        )
        return blk

    def malloc(self, nbytes: int, stream: int, frames: list) -> int:
        rounded = round_size(nbytes)
        small = rounded <= SMALL_SIZE
        pool = self._pool(small, stream)
        i = bisect.bisect_left(pool, (rounded, -1))
        if i < len(pool):
            blk = pool.pop(i)[2]
        else:
            blk = self._new_segment(small, stream, rounded, frames)
        remaining = blk.size - rounded
        if (small and remaining >= MIN_BLOCK) or (not small and remaining > SMALL_SIZE):
            rest = _Block(blk.addr + rounded, remaining, blk.seg, prev=blk, next=blk.next)
            if blk.next:
                blk.next.prev = rest
            blk.next = rest
            blk.size = rounded
            self._add_free(rest)
        blk.state = "active_allocated"
        blk.requested = nbytes
        blk.frames = frames
        self.blocks[blk.addr] = blk
        self._event("alloc", blk.addr, nbytes, stream, frames)
        return blk.addr

    def free_request(self, addr: int, frames: list) -> None:
        blk = self.blocks[addr]
        blk.state = "active_pending_free"
        self._event("free_requested", addr, blk.requested, blk.seg.stream, frames)

    def free_complete(self, addr: int, frames: list) -> None:
        blk = self.blocks.pop(addr)
        self._event("free_completed", addr, blk.requested, blk.seg.stream, frames)
        # coalesce with free neighbours in the same segment
        for nb in (blk.prev, blk.next):
            if nb is not None and nb.state == "inactive":
                self._remove_free(nb)
                if nb is blk.prev:
                    nb.size += blk.size
                    nb.next = blk.next
                    if blk.next:
                        blk.next.prev = nb
                    blk = nb
                else:
                    blk.size += nb.size
                    blk.next = nb.next
                    if nb.next:
                        nb.next.prev = blk
        self._add_free(blk)

    def free(self, addr: int, frames: list) -> None:
        self.free_request(addr, frames)
        self.free_complete(addr, frames)

    def reserved(self) -> int:
        return sum(s.size for s in self.segments)

    def dump_segments(self) -> list[dict[str, Any]]:
        out = []
        for seg in sorted(self.segments, key=lambda s: s.addr):
            blocks = []
            b = seg.head
            while b is not None:
                blocks.append(
                    {"address": b.addr, "size": b.size,
                     "requested_size": b.requested if b.state != "inactive" else b.size,
                     "state": b.state, "frames": b.frames if b.state != "inactive" else []}
                )  # fmt: skip
                b = b.next
            alloc = sum(x["size"] for x in blocks if x["state"] == "active_allocated")
            active = sum(x["size"] for x in blocks if x["state"] != "inactive")
            req = sum(x["requested_size"] for x in blocks if x["state"] != "inactive")
            out.append(
                {"device": self.device, "address": seg.addr, "total_size": seg.size,
                 "allocated_size": alloc, "active_size": active, "requested_size": req,
                 "stream": seg.stream, "segment_type": "small" if seg.small else "large",
                 "segment_pool_id": (0, 0), "is_expandable": seg.expandable,
                 "frames": seg.frames, "blocks": blocks}
            )  # fmt: skip
        return out


class _Frames:
    """Shared frame dicts and stack lists, like PyTorch's py_symbolize() output."""

    def __init__(self) -> None:
        self._frames: dict[tuple, dict] = {}
        self._stacks: dict[tuple, list] = {}

    def frame(self, filename: str, line: int, name: str) -> dict:
        key = (filename, line, name)
        f = self._frames.get(key)
        if f is None:
            f = self._frames[key] = {"filename": filename, "line": line, "name": name}
        return f

    def stack(self, *frames: tuple[str, int, str]) -> list:
        """frames innermost first."""
        s = self._stacks.get(frames)
        if s is None:
            s = self._stacks[frames] = [self.frame(*f) for f in frames]
        return s


TORCH = "/usr/lib/python3.11/site-packages/torch"
USER = "/home/user/project/train.py"
MODEL = "/home/user/project/model.py"
CPP_NOISE = (
    ("??", 0, "torch::unwind::unwind()"),
    ("??", 0, "torch::CapturedTraceback::gather(bool, bool, bool)"),
    ("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"),
)  # fmt: skip


def generate_trace_dict(
    *,
    events: int = 10_000,
    devices: int = 1,
    layers: int = 6,
    hidden: int = 256,
    batch_tokens: int = 2048,
    side_stream: bool = True,
    truncate: int = 0,
    expandable: bool = False,
    oom: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Build the snapshot dict (see module docstring). `events` is per device.

    `truncate` drops that many of the oldest events per device, as a full ring buffer
    does; `oom` ends the trace with an `oom` entry for a request that does not fit.
    """
    rng = random.Random(seed)
    fr = _Frames()
    t = [1_700_000_000_000_000]

    def clock() -> int:
        t[0] += rng.randint(1, 40)
        return t[0]

    annotations: list[dict[str, Any]] = []
    device_traces: list[list[dict[str, Any]]] = []
    all_segments: list[dict[str, Any]] = []
    main_stream, aux_stream = 0, 0x55D0_0000_1000
    for dev in range(devices):
        trace: list[dict[str, Any]] = []
        alloc = _Allocator(dev, 0x7F00_0000_0000 + dev * 0x0100_0000_0000, trace, clock, expandable)

        def annotate(name: str, stage: str, dev: int = dev) -> None:
            annotations.append({"name": name, "stage": stage, "device": dev, "time_us": clock()})

        # parameters exist before recording begins: blocks with no trace event
        alloc.record = False
        params = []
        for layer in range(layers):
            for pname, nbytes in (("weight", hidden * hidden * 4), ("bias", hidden * 4)):
                stack = fr.stack((MODEL, 20 + layer, "__init__"), (USER, 12, "<module>"))
                params.append((layer, pname, nbytes, alloc.malloc(nbytes, main_stream, stack)))
        alloc.record = True

        grads: dict[int, int] = {}
        opt_state: list[int] = []
        step = 0
        budget = events + truncate
        while len(trace) < budget:
            annotate(f"ProfilerStep#{step}", "START")
            annotate("forward", "START")
            acts = []
            for layer in range(layers):
                act_stack = fr.stack(
                    (f"{TORCH}/nn/functional.py", 2380, "linear"),
                    (MODEL, 40 + layer, "forward"),
                    (USER, 30, "train_step"),
                    (USER, 55, "<module>"),
                )
                tmp_stack = fr.stack(
                    (MODEL, 60 + layer, "forward"), (USER, 30, "train_step"), (USER, 55, "<module>")
                )
                acts.append(alloc.malloc(batch_tokens * hidden * 4, main_stream, act_stack))
                tmp = alloc.malloc(
                    rng.choice((512, 4096, batch_tokens * 4, batch_tokens * hidden * 2)),
                    main_stream,
                    tmp_stack,
                )
                alloc.free(tmp, tmp_stack)
            annotate("forward", "END")
            annotate("backward", "START")
            for layer in reversed(range(layers)):
                bw_stack = fr.stack(
                    *CPP_NOISE,
                    ("??", 0, "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
                    ("??", 0, "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
                )  # fmt: skip
                g_tmp = alloc.malloc(batch_tokens * hidden * 4, main_stream, bw_stack)
                for k in (2 * layer, 2 * layer + 1):
                    if k not in grads:
                        grads[k] = alloc.malloc(params[k][2], main_stream, bw_stack)
                alloc.free(acts[layer], bw_stack)
                if side_stream and layer % 3 == 0:
                    # used on a side stream (record_stream): the free completes later
                    alloc.free_request(g_tmp, bw_stack)
                    side = alloc.malloc(hidden * 64, aux_stream, bw_stack)
                    alloc.free(side, bw_stack)
                    alloc.free_complete(g_tmp, bw_stack)
                else:
                    alloc.free(g_tmp, bw_stack)
            annotate("backward", "END")
            annotate("Optimizer.step#AdamW.step", "START")
            opt_stack = fr.stack(
                (f"{TORCH}/optim/adamw.py", 480, "_single_tensor_adamw"),
                (USER, 34, "train_step"),
                (USER, 55, "<module>"),
            )
            state_stack = fr.stack(
                (f"{TORCH}/optim/adamw.py", 170, "_init_group"),
                (USER, 34, "train_step"),
                (USER, 55, "<module>"),
            )
            for _, _, nbytes, _ in params:
                if step == 0:
                    opt_state.append(alloc.malloc(nbytes, main_stream, state_stack))
                    opt_state.append(alloc.malloc(nbytes, main_stream, state_stack))
                tmp = alloc.malloc(nbytes, main_stream, opt_stack)
                alloc.free(tmp, opt_stack)
            annotate("Optimizer.step#AdamW.step", "END")
            annotate("Optimizer.zero_grad#AdamW.zero_grad", "START")
            zg_stack = fr.stack(
                (f"{TORCH}/optim/optimizer.py", 990, "zero_grad"),
                (USER, 36, "train_step"),
                (USER, 55, "<module>"),
            )
            for k in list(grads):
                alloc.free(grads.pop(k), zg_stack)
            annotate("Optimizer.zero_grad#AdamW.zero_grad", "END")
            annotate(f"ProfilerStep#{step}", "END")
            step += 1
        # The loop ends at a step boundary; cut to the exact size by undoing nothing:
        # we stop recording here, so the final state is the state after the last event.
        if oom:
            need = max(alloc.reserved(), 1) * 4
            trace.append({"action": "oom", "device_free": 64 * MB, "size": round_size(need),
                          "stream": main_stream, "time_us": clock(), "frames": fr.stack((USER, 31, "train_step")),
                          "compile_context": "N/A", "user_metadata": ""})  # fmt: skip
        if truncate:
            del trace[:truncate]
        device_traces.append(trace)
        all_segments.extend(alloc.dump_segments())
    settings = {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if expandable else "",
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": expandable,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << k): 0 for k in range(16)},
    }
    if truncate:
        settings["trace_alloc_overflowed"] = True
        settings["trace_alloc_max_entries"] = max(len(tr) for tr in device_traces)
    if truncate and annotations:
        first = min(tr[0]["time_us"] for tr in device_traces if tr)
        annotations = [a for a in annotations if a["time_us"] >= first]
    return {
        "segments": all_segments,
        "device_traces": device_traces,
        "allocator_settings": settings,
        "external_annotations": annotations,
    }


def generate_snapshot(
    path: str | Path | None = None, *, protocol: int = 4, **options: Any
) -> dict[str, Any]:
    """Generate a snapshot dict (options: see generate_trace_dict) and write it to `path`.

    Pickle protocol 4 by default, the one PyTorch's own viewer reads.
    """
    snap = generate_trace_dict(**options)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            pickle.dump(snap, fh, protocol=protocol)
    return snap
