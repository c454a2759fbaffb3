"""`memlens advise`: ranked changes that would save memory, each with the bytes at stake,
the call sites, and how sure the figure is.

Findings from the trace alone live here and in advise_estimates.py. The allocator replays
(the trace's own requests through the model of PyTorch's caching allocator, with the
recorded settings and with what-ifs) are made by advise_replays.py and handed in as
`replays` (docs/architecture.md, "memlens advise").

Findings, largest bytes first (an exact one before an estimate up to twice its bytes):
  fragmentation  reserved above what a what-if replay needed: exact for this sequence
  oom            the trace's OOM: its cause in one sentence and the smallest change
  attention      (B, H, S, S) matrices of a hand-written attention: estimate
  sharding       gradients and optimizer state over N GPUs: estimate
  leak           memory repeated steps left alive (analysis.leaks): exact for the trace
  checkpoint     activations live at the peak, freed by checkpointing: estimate
  autocast       fp32 activations autocast would halve, less the weight casts: estimate
  weight_casts   bf16/fp16 copies of fp32 weights autocast's cache holds: estimate
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.analysis.advise_casts import weight_cast_finding
from memlens.analysis.advise_changes import allocator_change, leak_change
from memlens.analysis.advise_estimates import attention_finding, sharding_finding
from memlens.analysis.advise_knobs import autocast_finding, checkpoint_finding
from memlens.analysis.leaks import leaks
from memlens.analysis.matching import rows_matching, stack_matches
from memlens.analysis.oom import oom_report
from memlens.analysis.results import AdviceReplay, AdviseResult, Finding
from memlens.analysis.sites import top_sites
from memlens.snapshot.actions import Action
from memlens.snapshot.model import DeviceTrace
from memlens.units import format_bytes as fb

# stacks through these run sharded or replicated already: FSDP (1 and 2), DDP, DeepSpeed,
# DTensor, NCCL collectives
PARALLEL = (
    r"torch[/\\]distributed[/\\](?:fsdp|_composable|tensor)[/\\]|nn[/\\]parallel[/\\]"
    r"distributed\.py|deepspeed[/\\]|ProcessGroupNCCL|c10d::"
)
# an exact finding (a replay, the trace itself) ranks above an estimate unless the estimate's
# bytes are more than this many times its own
EXACT_WEIGHT = 2


def already_parallel(dev: DeviceTrace) -> bool:
    """The run is sharded or replicated: its stacks run through FSDP/DDP/DeepSpeed/DTensor or
    NCCL, or the snapshot holds traces of several devices (ranks)."""
    several = sum(1 for t in dev.snapshot.traces.values() if t.n_events) > 1
    return several or bool(rows_matching(stack_matches(dev.snapshot, PARALLEL), dev.stack).any())


def rank_key(finding: Finding) -> int:
    """Larger first; exact findings weigh EXACT_WEIGHT times their bytes."""
    weight = EXACT_WEIGHT if finding["certainty"] == "exact" else 1
    return -finding["bytes"] * weight


def advise(
    dev: DeviceTrace,
    *,
    replays: Sequence[AdviceReplay] = (),
    top: int = 5,
    ranks: int | None = None,
    device_memory: int | None = None,
    hide_patterns: Sequence[str] | None = None,
    source_roots: Sequence[str] = (),
) -> AdviseResult:
    """Every finding `dev` has, exact ones first at similar bytes (rank_key). `replays`
    (recorded settings first) come from advise_replays.py; without them there is no
    fragmentation finding and the OOM finding names no allocator setting. `device_memory`
    (the GPU's total bytes) lets the OOM finding see memory held outside PyTorch. Sharding
    is proposed only for an explicit `ranks` and a run not sharded already. `source_roots`:
    where the program's source may be read to name the class to checkpoint."""
    notes: list[str] = []
    if not dev.n_events:
        notes.append("the trace is empty: nothing to advise")
    parallel = bool(dev.n_events) and already_parallel(dev)
    checkpoint = checkpoint_finding(dev, top, hide_patterns, source_roots)
    block = checkpoint["knob"].split("=", 1)[1] if checkpoint and checkpoint["knob"] else None
    sharding = None
    if parallel:
        notes.append(
            "the run is already sharded or replicated (FSDP/DDP/DeepSpeed/NCCL frames, or "
            "several ranks): no sharding finding"
        )
    elif ranks is not None:
        sharding = sharding_finding(dev, ranks, top, hide_patterns, block)
    elif dev.n_events:
        hint = sharding_finding(dev, 2, top, hide_patterns, block)
        if hint is not None:
            notes.append(
                "with N GPUs: --ranks N sizes sharding the gradients and optimizer state "
                f"(ZeRO-2 / FSDP2), {fb(hint['bytes'] * 2)} of them at the peak"
            )
    found = [
        f
        for f in (
            fragmentation_finding(dev, replays, top, hide_patterns),
            *oom_findings(dev, replays, top, hide_patterns, device_memory),
            attention_finding(dev, top, hide_patterns),
            sharding,
            *leak_findings(dev, top, hide_patterns),
            checkpoint,
            autocast_finding(dev, top, hide_patterns),
            weight_cast_finding(dev, top, hide_patterns),
        )
        if f is not None and f["bytes"] > 0
    ]
    recorded = [r for r in replays if r["recorded"]]
    if recorded and recorded[0]["mismatched_events"]:
        notes.append(
            f"the replay with the recorded settings differs from the recording at "
            f"{recorded[0]['mismatched_events']:,} events: its what-ifs are estimates"
        )
    found.sort(key=rank_key)
    return {
        "device": dev.device,
        "peak_active_bytes": dev.peak_active_bytes,
        "peak_reserved_bytes": dev.peak_reserved_bytes,
        "replays": list(replays),
        "findings": found,
        "notes": notes,
        "checks": [],
    }


def _segment_rows(dev: DeviceTrace) -> np.ndarray:
    """Allocation rows whose request reserved a new segment (the alloc right after a
    segment_alloc or segment_map)."""
    seg = np.flatnonzero(
        (dev.action[:-1] == Action.SEGMENT_ALLOC) | (dev.action[:-1] == Action.SEGMENT_MAP)
    )
    nxt = seg + 1
    nxt = nxt[dev.action[nxt] == Action.ALLOC]
    rows = dev.alloc_row[nxt]
    out: np.ndarray = rows[rows >= 0]
    return out


def fragmentation_finding(
    dev: DeviceTrace,
    replays: Sequence[AdviceReplay],
    top: int,
    hide_patterns: Sequence[str] | None,
) -> Finding | None:
    """Reserved bytes the best what-if replay would not have needed."""
    what_ifs = [r for r in replays if not r["recorded"]]
    if not what_ifs:
        return None
    best = max(what_ifs, key=lambda r: r["saving_bytes"])
    recorded = [r for r in replays if r["recorded"]]
    exact = bool(recorded) and recorded[0]["mismatched_events"] == 0
    gap = dev.peak_reserved_bytes - dev.peak_active_bytes
    return {
        "kind": "fragmentation",
        "summary": f"reserved peaks {fb(gap)} above active; with {best['settings']} the same "
        f"requests would have peaked at {fb(best['peak_reserved_bytes'])} reserved",
        "bytes": best["saving_bytes"],
        "certainty": "exact" if exact else "estimate",
        "covers": "this trace's alloc/free sequence replayed through the allocator model "
        "(it reproduces the recorded reserved curve"
        + ("" if exact else " only approximately")
        + "); segments older than the trace are kept as recorded",
        "sites": top_sites(dev, _segment_rows(dev), top=top, hide_patterns=hide_patterns),
        "change": allocator_change(best["settings"]),
        "knob": best["settings"],
    }


def oom_findings(
    dev: DeviceTrace,
    replays: Sequence[AdviceReplay],
    top: int,
    hide_patterns: Sequence[str] | None,
    device_memory: int | None = None,
) -> list[Finding]:
    """The first OOM of the trace (the program stops or recovers after it): why, and the
    smallest change that would have let it pass. Its cause: fragmentation when the cache's
    unused bytes plus the device's free bytes would have held the request; else another
    process when, `device_memory` given, memory outside PyTorch (total - reserved - free)
    would have made up the rest; else the device is full."""
    report = oom_report(dev, top=top, hide_patterns=hide_patterns)
    if not report["count"]:
        return []
    o = report["ooms"][0]
    req, free, cached = o["requested_bytes"], o["device_free_bytes"], o["reserved_unused_bytes"]
    fits = [r["settings"] for r in replays if not r["recorded"] and r["oom_fits"]]
    if cached + free >= req:
        cause = (
            f"fragmentation: {fb(cached)} was cached but free in pieces (largest "
            f"{fb(o['largest_free_bytes'])}) and the device had {fb(free)} free, "
            f"for a request of {fb(req)}"
        )
        short = req - free  # the cache held enough; the device alone was short by this
    elif (
        device_memory is not None
        and cached + free + (outside := device_memory - o["reserved_bytes"] - free) >= req
    ):
        short = req - free - cached
        cause = (
            f"another process: {fb(outside)} of the {fb(device_memory)} device was held "
            f"outside PyTorch (another process, the CUDA context), {fb(free)} free and "
            f"{fb(cached)} cached could not hold a request of {fb(req)}"
        )
    else:
        short = req - free - cached
        cause = (
            f"device full: {fb(o['active_bytes'])} in use, {fb(cached)} cached and {fb(free)} "
            f"free on the device could not hold a request of {fb(req)}"
        )
    change = (
        f"{fits[0]} replays the trace within the same memory"
        if fits
        else f"free {fb(short)} of what is live at the OOM"
        + (" or held by the other process" if cause.startswith("another") else "")
    )
    return [
        {
            "kind": "oom",
            "summary": f"OOM at event {o['event']:,}: {cause}; smallest change: {change}",
            "bytes": short,
            "certainty": "exact",
            "covers": "the bytes the device was short of at the OOM (memory held outside "
            "PyTorch, such as another process, shows only as less device_free); "
            "an allocator what-if is a replay of the trace up to the OOM",
            "sites": o["top_sites"],
            "change": allocator_change(fits[0])
            if fits
            else f"# free {fb(short)} of what is live at the OOM: the call sites below, or "
            "the other findings' changes",
            "knob": fits[0] if fits else None,
        }
    ]


def leak_findings(dev: DeviceTrace, top: int, hide_patterns: Sequence[str] | None) -> list[Finding]:
    """Memory that repeated stages (steps) left alive, from analysis.leaks."""
    out: list[Finding] = []
    for g in leaks(dev, top=top, hide_patterns=hide_patterns)["groups"]:
        if not g["suspects_bytes"]:
            continue
        out.append(
            {
                "kind": "leak",
                "summary": f"{g['count']} occurrences of {g['base_name']!r} left "
                f"{fb(g['suspects_bytes'])} alive that a later one did not free "
                f"(growth per step {fb(g['growth_per_step_bytes'])})",
                "bytes": g["suspects_bytes"],
                "certainty": "exact",
                "covers": "bytes made in a repeated stage, alive at the end of the trace, by "
                "sites that left memory in at least two occurrences (memlens leaks); "
                "later steps would add more",
                "sites": [
                    {k: v for k, v in s.items() if k != "per_occurrence"}  # type: ignore[misc]
                    for s in g["suspects"]
                ],
                "change": leak_change(g["suspects"][0]["site"] if g["suspects"] else "the sites"),
                "knob": None,
            }
        )
    return out
