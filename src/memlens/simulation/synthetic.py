"""Synthetic snapshots in PyTorch's exact format, of any size, with realistic structure.

Real snapshots cannot ship with memlens, so tests, benchmarks and the README example use
these (`memlens generate`, `memlens.generate_snapshot`). A training loop drives the same
caching-allocator model that `memlens simulate` uses (simulation.allocator.CachingAllocator:
512-byte rounding, small 2 MiB and large 20 MiB / rounded segments, best-fit reuse per
stream and pool, splitting and coalescing, expandable segments): parameters that existed
before recording (blocks with no trace event), forward activations kept for backward,
temporaries, gradients, AdamW state created on the first step, `record_stream` frees that
complete late on a side stream, and record_function annotations (ProfilerStep#N, forward,
backward, Optimizer.step#AdamW.step, Optimizer.zero_grad#AdamW.zero_grad). Frame dicts
and stack lists are shared objects, as in PyTorch's pickles, so files stay small.

Options add truncated traces (ring buffer eviction), several devices, expandable
segments (segment_map instead of segment_alloc) and an OOM entry. The final `segments`
are the model's own state after the last event, so memlens's replay invariant holds.
Pure Python: importing this never imports torch.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

from memlens.analysis.allocator_model import (
    BASE_ADDRESS,
    MB,
    AllocatorSettings,
    CachingAllocator,
    round_size,
)

# Each device's addresses start this far apart: room for 16 expandable ranges per device
# (each reserves 2**40 bytes of address space), so devices never share an address.
DEVICE_ADDRESS_STRIDE = 1 << 44
# PyTorch >= 2.5 records these on every trace entry
ENTRY_FIELDS = {"compile_context": "N/A", "user_metadata": ""}


class _Frames:
    """Shared frame dicts and stack lists, like PyTorch's py_symbolize() output."""

    def __init__(self) -> None:
        self._frames: dict[tuple[str, int, str], dict[str, Any]] = {}
        self._stacks: dict[tuple[tuple[str, int, str], ...], list[dict[str, Any]]] = {}

    def frame(self, filename: str, line: int, name: str) -> dict[str, Any]:
        key = (filename, line, name)
        f = self._frames.get(key)
        if f is None:
            f = self._frames[key] = {"filename": filename, "line": line, "name": name}
        return f

    def stack(self, *frames: tuple[str, int, str]) -> list[dict[str, Any]]:
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
    recording = [True]

    def clock() -> int:
        if recording[0]:  # events before recording are dropped: no time passes for them
            t[0] += rng.randint(1, 40)
        return t[0]

    conf = "expandable_segments:True" if expandable else ""
    alloc_settings = AllocatorSettings.parse(conf)
    annotations: list[dict[str, Any]] = []
    device_traces: list[list[dict[str, Any]]] = []
    all_segments: list[dict[str, Any]] = []
    main_stream, aux_stream = 0, 0x55D0_0000_1000

    def in_step(line: int, *inner: tuple[str, int, str]) -> list[dict[str, Any]]:
        """The stack of code called from the user's train_step at `line`."""
        return fr.stack(*inner, (USER, line, "train_step"), (USER, 55, "<module>"))

    for dev in range(devices):
        alloc = CachingAllocator(
            None,
            alloc_settings,
            clock,
            base_address=BASE_ADDRESS + dev * DEVICE_ADDRESS_STRIDE,
            entry_fields=ENTRY_FIELDS,
        )
        trace = alloc.trace

        def annotate(name: str, stage: str, dev: int = dev) -> None:
            annotations.append({"name": name, "stage": stage, "device": dev, "time_us": clock()})

        # parameters exist before recording begins: blocks with no trace event
        recording[0] = False
        params = []
        for layer in range(layers):
            for pname, nbytes in (("weight", hidden * hidden * 4), ("bias", hidden * 4)):
                stack = fr.stack((MODEL, 20 + layer, "__init__"), (USER, 12, "<module>"))
                params.append((layer, pname, nbytes, alloc.malloc(nbytes, main_stream, stack)))
        trace.clear()
        recording[0] = True

        grads: dict[int, int] = {}
        opt_state: list[int] = []
        step = 0
        budget = events + truncate
        while len(trace) < budget:
            annotate(f"ProfilerStep#{step}", "START")
            annotate("forward", "START")
            acts = []
            for layer in range(layers):
                act_stack = in_step(
                    30,
                    (f"{TORCH}/nn/functional.py", 2380, "linear"),
                    (MODEL, 40 + layer, "forward"),
                )
                tmp_stack = in_step(30, (MODEL, 60 + layer, "forward"))
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
                    (
                        "??",
                        0,
                        "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
                    ),
                    (
                        "??",
                        0,
                        "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
                    ),
                )
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
            opt_stack = in_step(34, (f"{TORCH}/optim/adamw.py", 480, "_single_tensor_adamw"))
            state_stack = in_step(34, (f"{TORCH}/optim/adamw.py", 170, "_init_group"))
            for _, _, nbytes, _ in params:
                if step == 0:
                    opt_state.append(alloc.malloc(nbytes, main_stream, state_stack))
                    opt_state.append(alloc.malloc(nbytes, main_stream, state_stack))
                tmp = alloc.malloc(nbytes, main_stream, opt_stack)
                alloc.free(tmp, opt_stack)
            annotate("Optimizer.step#AdamW.step", "END")
            annotate("Optimizer.zero_grad#AdamW.zero_grad", "START")
            zg_stack = in_step(36, (f"{TORCH}/optim/optimizer.py", 990, "zero_grad"))
            for k in list(grads):
                alloc.free(grads.pop(k), zg_stack)
            annotate("Optimizer.zero_grad#AdamW.zero_grad", "END")
            annotate(f"ProfilerStep#{step}", "END")
            step += 1
        # The loop ends at a step boundary; cut to the exact size by undoing nothing:
        # we stop recording here, so the final state is the state after the last event.
        if oom:
            need = max(alloc.reserved, 1) * 4
            trace.append(
                {
                    "action": "oom",
                    "device_free": 64 * MB,
                    "size": round_size(need),
                    "stream": main_stream,
                    "time_us": clock(),
                    "frames": fr.stack((USER, 31, "train_step")),
                    "compile_context": "N/A",
                    "user_metadata": "",
                }
            )
        if truncate:
            del trace[:truncate]
        device_traces.append(trace)
        all_segments.extend(alloc.segments_snapshot(dev))
    settings = alloc_settings.as_snapshot_dict(conf)
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
