"""A simulation session: fake CUDA tensors whose storages live in a modelled allocator.

Storage lifetimes: a TorchDispatchMode above FakeTensorMode looks at every op's outputs;
a CUDA storage it has not seen (keyed by its StorageImpl address, `_cdata`) is a new
allocation. PyTorch keeps one Python object per live storage (PyObject preservation), so
`weakref.finalize` on `untyped_storage()` fires exactly when the StorageImpl dies: that is
the free. Views share their base's storage and are not allocations, as on a GPU.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.autograd.function import BackwardCFunction
from torch.utils._pytree import tree_flatten

from memlens.analysis.allocator_model import SimulatedOOM
from memlens.errors import MemlensError
from memlens.simulation.config import SimulateConfig
from memlens.simulation.distributed import process_group
from memlens.simulation.distributed.values import host_numpy
from memlens.simulation.gpus import cublas_workspace_from_config
from memlens.simulation.patches import (
    cublas_lt,
    cuda_graphs,
    cuda_kernels,
    cuda_stubs,
    cuda_surface,
    deferred_dynamo,
    device_index,
    fake_cuda,
    sdpa,
)
from memlens.simulation.patches import torch_compile as compiled
from memlens.simulation.patches.frames import FrameCollector
from memlens.simulation.patches.tracker import Tracker
from memlens.simulation.patches.written import OwnSnapshots
from memlens.simulation.progress import DEFAULT_EVERY, ProgressTicker, SimProgress
from memlens.simulation.request_log import LoggingAllocator

# torch._C._cuda_attach_out_of_memory_observer callbacks: (device, bytes requested, device
# total, device free). Process-wide, as in PyTorch's allocator: code that attaches once per
# process (memlens.dump_on_oom) must still hear OOMs in a later simulation.
OomObserver = Callable[[int, int, int, int], None]
_oom_observers: list[OomObserver] = []


class Simulation:
    """Runs user code with simulated CUDA memory; see memlens.simulation.api.simulate."""

    def __init__(self, output: str | Path | None = None, config: SimulateConfig | None = None):
        config = config or SimulateConfig()
        self.config = config
        self.output = Path(output) if output is not None else None
        self.alloc_conf = config.allocator_conf()
        # a CachingAllocator that also logs the requests, for plan's replays (request_log.py)
        self.allocator = LoggingAllocator(config.device_memory_bytes(), config.allocator_settings())
        self.frames = FrameCollector(enabled=config.stacks is not None)
        self.gpu = config.card()
        # None: decided at the first GEMM, from $CUBLAS_WORKSPACE_CONFIG as the script
        # left it, else the card's default (PyTorch reads the variable once, then)
        self._workspace_size = config.cublas_workspace_bytes()
        self.workspace_config: str | None = None  # the CUBLAS_WORKSPACE_CONFIG that decided
        self.nvtx_annotations = config.nvtx_annotations
        # The GPU recorder keeps no stack for blocks allocated before history was switched
        # on; early_stacks=True keeps the ones the simulation knows.
        self.early_stacks = config.early_stacks
        self.routing = config.routing_assumption()  # expert parallelism's token counts
        # what the run assumed where values were needed ({"routing": ...}), in the snapshot
        self.assumptions: dict[str, str] = {}
        # Approximations the run went through (one line each, in order, no repeats).
        self.notes: list[str] = []
        # What the code's own torch.cuda.memory._dump_snapshot calls wrote, newest last.
        self.dumps: list[Path] = []
        self.last_dump: dict[str, Any] | None = None
        # Every snapshot file the code wrote itself (also `_snapshot()` pickled or saved).
        self.own = OwnSnapshots()
        # The whole run (every entry, the state at exit), built on exit when asked for.
        self.keep_whole_run = False
        self.whole_run: dict[str, Any] | None = None
        self.max_entries = config.max_entries  # like the recorder's ring buffer: keep the newest
        # every annotation of the run; the code's history window is [_ann_start:_ann_stop]
        self.annotations: list[dict[str, Any]] = []
        # the backend each F.scaled_dot_product_attention call took (flash, efficient, ...)
        self.sdpa_backends: list[str] = []
        self.in_compiled_graph = (
            False  # a compiled graph's runner runs an op: it places buffers itself
        )
        self._ann_start = 0
        self._ann_stop: int | None = None
        self._live: dict[int, int] = {}  # StorageImpl address -> block address
        self._workspaces: dict[str, int] = {}
        self._trace_start = 0
        self._trace_stop: int | None = None
        # True once the code itself switched history on (torch._C._cuda_isHistoryEnabled);
        # the whole-run recording a simulation starts with does not count.
        self._history_on = False
        self._patches = fake_cuda.Patches()
        self._fake_mode: FakeTensorMode | None = None
        self._tracker: Tracker | None = None
        self._thread = threading.get_ident()
        # torch.cuda.set_device's choice (a simulated rank's LOCAL_RANK); all one allocator
        self.device_index = 0
        # True while DDP's reducer builds buckets: `cpu` in a factory op means the device
        self.cpu_options_mean_cuda = False
        self.snapshot: dict[str, Any] | None = None
        # heard every `progress_every` seconds while the block runs (memlens simulate's
        # live line); None: no ticker thread
        self.on_progress: Callable[[SimProgress], None] | None = None
        self.progress_every = DEFAULT_EVERY
        self._ticker: ProgressTicker | None = None

    # ------------------------------------------------------------ context manager
    def __enter__(self) -> Simulation:
        # A fake mode imports torch._dynamo.config, and with it all of Dynamo (seconds of
        # CPU): only its config until the script uses Dynamo (patches/deferred_dynamo.py).
        # Before the patches: it finds the fake mode's own dispatch, not fake_cuda's.
        deferred_dynamo.defer()
        cuda_stubs.reset_streams()
        self.autocast_policy = fake_cuda.install(self._patches, self._cuda_api(), self.note)
        cuda_surface.install(self._patches, self)
        device_index.install(self._patches)
        cuda_graphs.install(self._patches, self)
        sdpa.install(self._patches, self)
        cuda_kernels.install(self._patches, self)
        process_group.install(self._patches, self)
        self.own.install(self._patches, self.note)
        self._patch_record_function()
        self._patch_private_api()
        self._patch_cuda_extras()
        self._fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        self._tracker = Tracker(self, self._fake_mode)
        self._patches.set(
            torch.Tensor,
            "numpy",
            host_numpy(torch.Tensor.numpy, self._tracker.values),
        )
        # torch.tensor(data, device="cuda") must build on CPU and move inside the fake
        # mode (FakeTensorMode does this itself only when CUDA reports unavailable).
        self._lift_cpu_only = torch._C._only_lift_cpu_tensors()
        torch._C._set_only_lift_cpu_tensors(True)
        try:
            self._fake_mode.__enter__()
            # TorchDispatchMode leaves __enter__/__exit__ unannotated
            self._tracker.__enter__()  # type: ignore[no-untyped-call]
        except BaseException:
            torch._C._set_only_lift_cpu_tensors(self._lift_cpu_only)
            self._patches.restore()
            raise
        if self.on_progress is not None:
            self._ticker = ProgressTicker(self.allocator, self.on_progress, self.progress_every)
            self._ticker.start()
        return self

    def __exit__(self, *exc: Any) -> None:  # (type, value, traceback), handed on
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        # The state at exit is what the code holds when it leaves the block: taken before
        # anything is torn down (restoring the patches destroys the process groups and
        # resets Dynamo, whose caches hold compiled graphs' tensors).
        self.snapshot = self.build_snapshot()
        if self.keep_whole_run:
            self.whole_run = self.build_snapshot(whole=True)
        try:
            assert self._tracker is not None and self._fake_mode is not None  # __enter__ ran
            self._tracker.__exit__(*exc)  # type: ignore[no-untyped-call]
            self._fake_mode.__exit__(*exc)
        finally:
            torch._C._set_only_lift_cpu_tensors(self._lift_cpu_only)
            self._patches.restore()
            cuda_stubs.reset_streams()
            if self.output is not None:
                self.write(self.output)

    # ------------------------------------------------------------ tracking
    def holds(self, t: Any) -> bool:
        """`t` is a CUDA tensor of the simulated program: a fake of this simulation's fake
        mode. Dynamo's and AOTAutograd's own fakes (made while compiling, some kept for the
        whole run: DDP's graph splitter keeps a fake copy of each bucket's parameters) are
        no memory of the program, as on a GPU."""
        return (
            isinstance(t, FakeTensor)
            and t.fake_device.type == "cuda"
            and t.fake_mode is self._fake_mode
        )

    def _track_outputs(self, out: Any) -> None:
        if self.in_compiled_graph:
            return  # a compiled graph's runner decides its buffers (simulation/patches/torch_compile.py)
        for t in _leaves(out):
            if not self.holds(t):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self._live:
                continue
            nbytes = storage.nbytes()
            if nbytes == 0:
                continue  # the real allocator hands out no block for empty tensors
            self._live[key] = self._malloc(nbytes)
            weakref.finalize(storage, self._on_storage_freed, key)

    def _stack(self) -> list[dict[str, Any]]:
        node = torch._C._current_autograd_node()
        if node is None or isinstance(node, BackwardCFunction):
            return self.frames.collect()  # forward, or a Python autograd.Function's backward
        return self.frames.autograd_node(node.name())

    def _malloc(self, nbytes: int, stack: list[dict[str, Any]] | None = None) -> int:
        try:
            return self.allocator.malloc(
                nbytes, cuda_stubs.current_stream_id(), self._stack() if stack is None else stack
            )
        except SimulatedOOM as oom:
            # PyTorch calls the observers after the `oom` trace entry, before raising.
            total = self.allocator.device_memory or 0
            for observer in list(_oom_observers):
                observer(0, oom.size, total, oom.device_free)
            raise torch.OutOfMemoryError(self._oom_message(oom)) from None

    def _oom_message(self, oom: SimulatedOOM) -> str:
        mib = 2**20
        total = self.allocator.device_memory or 0
        return (
            f"CUDA out of memory (simulated by memlens). Tried to allocate "
            f"{oom.size / mib:.2f} MiB. GPU 0 has a total capacity of {total / 2**30:.2f} GiB "
            f"of which {oom.device_free / mib:.2f} MiB is free. "
            f"{oom.allocated / mib:.2f} MiB is allocated by PyTorch, and "
            f"{(oom.reserved - oom.allocated) / mib:.2f} MiB is reserved by PyTorch but "
            f"unallocated."
        )

    def _on_storage_freed(self, key: int) -> None:
        address = self._live.pop(key, None)
        if address is not None:
            self.allocator.free(address, self._stack())

    @property
    def cublas_workspace(self) -> int:
        """cuBLAS's workspace per thread; fixed at the first GEMM, as in PyTorch."""
        if self._workspace_size is None:
            config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
            self._workspace_size = cublas_workspace_from_config(config, self.gpu.cublas_workspace)
            self.workspace_config = config
        return self._workspace_size

    def _ensure_workspace(self, lt: bool = False) -> None:
        # cuBLAS keeps one workspace per (handle, stream); forward and backward run on
        # different threads (handles) on a GPU, so they get one each, and a GEMM on a side
        # stream or a graph's capture stream gets its own (a capture's in the graph's pool)
        thread = "backward" if torch._C._current_autograd_node() is not None else "forward"
        stream = cuda_stubs.current_stream_id()
        kind = thread if stream == 0 else f"{thread}@{stream}"
        size = self.cublas_workspace
        current = self._workspaces.get(kind)
        if current is None:
            if size > 0:
                self._workspaces[kind] = self._malloc(size)
        elif self.allocator.live[current].requested < size:
            # torch.backends.cuda.cublas_workspace_size(n) grew it: setWorkspaceForHandle
            # allocates the larger one, then the map's assignment frees the old one
            self._workspaces[kind] = self._malloc(size)
            self.allocator.free(current, self._stack())
        # cuBLASLt's own workspace (patches/cublas_lt.py), per handle too; the option
        # cublas_workspace=0 omits it with cuBLAS's
        if (
            lt
            and f"{kind} lt" not in self._workspaces
            and self.config.cublas_workspace_bytes() != 0
        ):
            lt_size = cublas_lt.workspace_bytes()
            if lt_size > 0:
                self._workspaces[f"{kind} lt"] = self._malloc(lt_size)

    def empty_cache(self) -> None:
        # The cuBLAS workspaces stay allocated: torch 2.11 on an H200 kept both a side
        # stream's and a capture stream's through torch.cuda.graph's empty_cache
        # (tests/data/gpu/graphs/graph_capture.pickle.gz); torch._C._cuda_clearCublasWorkspaces
        # drops them.
        self.allocator.empty_cache(self.frames.collect())

    def clear_cublas_workspaces(self) -> None:
        frames = self.frames.collect()
        for address in self._workspaces.values():
            self.allocator.free(address, frames)
        self._workspaces.clear()

    # ------------------------------------------------------------ torch.cuda answers
    def _cuda_api(self) -> dict[str, Any]:
        alloc = self.allocator

        def reset_peak(device: object = None) -> None:
            alloc.peak_allocated, alloc.peak_reserved = alloc.allocated, alloc.reserved

        def record_history(
            enabled: str | bool | None = "all",
            *args: Any,
            clear_history: bool = False,
            **kwargs: Any,
        ) -> None:
            if enabled is None or enabled is False:
                self._history_on = False
                self._trace_stop, self._ann_stop = len(alloc.trace), len(self.annotations)
            else:
                # As on a GPU: switching history on while it is on keeps what was recorded
                # (unless clear_history); switching it on after off starts afresh.
                if not self._history_on or clear_history:
                    self._trace_start, self._trace_stop = len(alloc.trace), None
                    self._ann_start, self._ann_stop = len(self.annotations), None
                self._history_on = True

        def dump_snapshot(
            filename: str | Path = "dump_snapshot.pickle", *args: Any, **kwargs: Any
        ) -> None:
            self.last_dump = self.build_snapshot()
            path = self.write(filename, self.last_dump)
            self.dumps.append(path)
            self.own.wrote(
                path, "torch.cuda.memory._dump_snapshot", self.last_dump, self._window(False)
            )

        def snapshot(device: object = None, **kwargs: Any) -> dict[str, Any]:
            taken = self.build_snapshot()
            self.own.taken(taken, self._window(False))
            return taken

        def stats(device: object = None) -> dict[str, int]:
            return cuda_stubs.memory_stats(
                alloc.allocated, alloc.reserved, alloc.peak_allocated, alloc.peak_reserved
            )

        gpu = self.gpu
        total = alloc.device_memory or gpu.memory
        # torch.cuda re-exports torch.cuda.memory's functions: patch both names
        memory: dict[str, Callable[..., Any]] = {
            "memory_allocated": lambda device=None: alloc.allocated,
            "max_memory_allocated": lambda device=None: alloc.peak_allocated,
            "memory_reserved": lambda device=None: alloc.reserved,
            "max_memory_reserved": lambda device=None: alloc.peak_reserved,
            "reset_peak_memory_stats": reset_peak,
            "reset_max_memory_allocated": reset_peak,
            "mem_get_info": lambda device=None: (total - alloc.reserved, total),
            "memory_stats": stats,
            "memory_summary": lambda device=None, abbreviated=False: (
                f"memlens simulation: {alloc.allocated:,} bytes allocated, "
                f"{alloc.reserved:,} bytes reserved"
            ),
            "empty_cache": self.empty_cache,
        }
        return {
            **memory,
            **{f"memory.{name}": fn for name, fn in memory.items()},
            "is_available": lambda: True,
            "device_count": lambda: 1,
            "current_device": lambda: self.device_index,
            "set_device": self._set_device,
            "is_initialized": lambda: True,
            "_lazy_init": lambda: None,
            "init": lambda: None,
            "synchronize": lambda device=None: None,
            "is_bf16_supported": lambda including_emulation=True: gpu.bf16,
            "get_device_name": lambda device=None: gpu.name,
            "get_device_capability": lambda device=None: gpu.capability,
            "get_device_properties": lambda device=None: cuda_stubs.DeviceProperties(gpu, total),
            "_exchange_device": lambda device: 0,
            "_maybe_exchange_device": lambda device: 0,
            "get_rng_state": lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
            "set_rng_state": lambda new_state, device="cuda": None,
            "Event": cuda_stubs.Event,
            "Stream": cuda_stubs.Stream,
            "StreamContext": cuda_stubs.StreamContext,
            "current_stream": lambda device=None: cuda_stubs.Stream.of(
                cuda_stubs.current_stream_id()
            ),
            "default_stream": lambda device=None: cuda_stubs.Stream.of(0),
            "stream": cuda_stubs.StreamContext,
            "memory._record_memory_history": record_history,
            "memory._dump_snapshot": dump_snapshot,
            "memory._snapshot": snapshot,
        }

    def _set_device(self, device: int | str | torch.device) -> None:
        index = device if isinstance(device, int) else torch.device(str(device)).index
        if index is not None and index >= 0:
            self.device_index = index

    def _patch_private_api(self) -> None:
        # torch._C functions a CPU-only build lacks and memlens's own capture code calls
        # (memlens.record, memlens.dump_on_oom, the trainer callbacks).
        self._patches.set(torch._C, "_cuda_isHistoryEnabled", lambda: self._history_on)
        self._patches.set(torch._C, "_cuda_attach_out_of_memory_observer", _oom_observers.append)
        self._patches.set(torch._C, "_cuda_clearCublasWorkspaces", self.clear_cublas_workspaces)

    def _patch_cuda_extras(self) -> None:
        # torch.cuda.nvtx: ranges become annotations (like record_function) unless opted out.
        annotate = self._annotate if self.nvtx_annotations else None
        self._patches.set(torch.cuda.nvtx, "_nvtx", cuda_stubs.Nvtx(annotate))
        compiled.install(self._patches, self)

    def note(self, text: str) -> None:
        """Record that the run took a path known to be approximate (once per text)."""
        if text not in self.notes:
            self.notes.append(text)

    def _patch_record_function(self) -> None:
        # record_function ranges become external_annotations, as PyTorch's RecordFunction
        # callback writes them while history is recorded.
        cls = torch.autograd.profiler.record_function
        enter: Callable[[Any], Any] = cls.__enter__
        exit_: Callable[..., Any] = cls.__exit__
        sim = self

        def __enter__(rf: Any) -> Any:
            sim._annotate(rf.name, "START")
            return enter(rf)

        def __exit__(rf: Any, *exc: Any) -> Any:
            result = exit_(rf, *exc)
            sim._annotate(rf.name, "END")
            return result

        self._patches.set(cls, "__enter__", __enter__)
        self._patches.set(cls, "__exit__", __exit__)

    def _annotate(self, name: str, stage: str) -> None:
        if threading.get_ident() == self._thread:
            self.annotations.append(
                {"name": name, "stage": stage, "device": 0, "time_us": int(time.time() * 1e6)}
            )

    # ------------------------------------------------------------ output
    def _window(self, whole: bool) -> tuple[int, int, int]:
        """(first, stop, run entries): the trace entries a snapshot taken now holds (the
        code's history window, or the whole run), after the ring buffer's cut."""
        total = len(self.allocator.trace)
        first, stop = (0, total) if whole else (self._trace_start, self._trace_stop)
        stop = total if stop is None else stop
        if self.max_entries is not None and stop - first > self.max_entries:
            first = stop - self.max_entries
        return first, stop, total

    def build_snapshot(self, whole: bool = False) -> dict[str, Any]:
        """The snapshot `_snapshot()` would answer now: the code's history window, or with
        `whole` every entry since the simulation began; the state is the current one."""
        first, stop, _ = self._window(whole)
        start = 0 if whole else self._trace_start
        window = self.allocator.trace[start:stop]
        trace = self.allocator.trace[first:stop]
        segments = self.allocator.segments_snapshot(0)
        if start > 0 and not self.early_stacks:
            segments = _without_early_stacks(segments, window)
        annotations = (
            self.annotations if whole else self.annotations[self._ann_start : self._ann_stop]
        )
        snapshot = {
            "segments": segments,
            "device_traces": [trace],
            "allocator_settings": self.allocator.settings.as_snapshot_dict(self.alloc_conf),
            "external_annotations": list(annotations),
        }
        if self.assumptions:
            snapshot["memlens_simulation"] = {"assumptions": dict(self.assumptions)}
        return snapshot

    def write(self, path: str | Path, snapshot: dict[str, Any] | None = None) -> Path:
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                pickle.dump(snapshot or self.build_snapshot(), f, protocol=4)
        except OSError as err:
            raise MemlensError(f"cannot write the snapshot to {path}: {err.strerror}") from None
        return path


_SCALARS = (int, float, bool, str)


def _leaves(out: Any) -> Any:
    """tree_flatten(out)'s leaves, without flattening where there is nothing to flatten:
    an op's output is a tensor, or a tuple or list of tensors and scalars (the tracker
    calls this for every op)."""
    if isinstance(out, torch.Tensor):
        return (out,)
    if type(out) is tuple or type(out) is list:
        for x in out:
            if not (x is None or isinstance(x, torch.Tensor) or type(x) in _SCALARS):
                return tree_flatten(out)[0]
        return out
    return tree_flatten(out)[0]


def _without_early_stacks(
    segments: list[dict[str, Any]], window: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Segments as the GPU recorder shows them: blocks and segments made before history
    was switched on have no frames (their allocation was never recorded)."""
    allocs = {e["addr"] for e in window if e["action"] == "alloc"}
    made = {e["addr"] for e in window if e["action"] in ("segment_alloc", "segment_map")}
    out = []
    for seg in segments:
        blocks = [
            b if b["state"] != "active_allocated" or b["address"] in allocs else {**b, "frames": []}
            for b in seg["blocks"]
        ]
        out.append(
            {**seg, "blocks": blocks, "frames": seg["frames"] if seg["address"] in made else []}
        )
    return out
