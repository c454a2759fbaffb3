"""Findings of `memlens advise` that a code knob of `memlens plan --what-if` answers
(simulation/knobs/code.py): estimates from what is live at the active peak, by category
(analysis.categories), never a replay.

checkpoint: activations (allocated outside backward, freed after a later backward event:
  saved for backward) live at the peak, freed no later than the trace's last backward
  event (tensors a script frees after its last step, such as the model's parameters when
  `main()` returns, also come after a backward event: they are not activations). Checkpointing the modules that make them keeps
  only each module's input until its backward recomputes the rest, so their bytes are
  the estimate (less the inputs kept and the one module recomputed at a time). The
  snapshot names functions, not module classes: the class is read from the source
  (analysis/source_classes.py: the repeated block, e.g. a model's `for layer in
  self.layers` child) when the frames' files, or files with the same trailing path under
  --source-root or the current folder, can be read; else the finding gives the call sites.
autocast: a trace with no allocation under autocast (no `autocast` / `cached_cast` frame)
  is taken to run fp32 (a snapshot records no dtypes). bf16/fp16 autocast would store the
  activations live at the peak at half size and add half-size copies of the parameters
  live at the peak (the parameter category and what is freed after the last backward:
  the weight casts the backward keeps): the estimate is half the
  activations less half the parameters, a finding only when positive.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.analysis.advise_changes import autocast_change, checkpoint_change, frameworks
from memlens.analysis.categories import ACTIVATION, PARAMETER, categorize
from memlens.analysis.inferred_steps import BACKWARD
from memlens.analysis.matching import rows_matching, stack_matches
from memlens.analysis.results import Finding
from memlens.analysis.sites import top_sites
from memlens.analysis.source_classes import repeated_block
from memlens.snapshot.model import DeviceTrace
from memlens.units import format_bytes as fb

AUTOCAST = r"(?i)autocast|cached_cast"


def _live(dev: DeviceTrace) -> tuple[np.ndarray, np.ndarray]:
    """Allocation rows live at the active peak: (activations freed by the last backward
    event, parameters and what else outlives the steps: the parameter category and the
    "activations" freed after the last backward event, see the module's docstring)."""
    cat, _ = categorize(dev)
    live = dev.live_at_peak()
    acts = live[cat[live] == ACTIVATION]
    in_bw = rows_matching(stack_matches(dev.snapshot, BACKWARD), dev.stack.astype(np.int64))
    last = np.flatnonzero(in_bw)
    saved = dev.free_event[acts] <= (last[-1] if len(last) else -1)
    kept = np.concatenate([live[cat[live] == PARAMETER], acts[~saved]])
    return acts[saved], kept


# stacks read for the class to checkpoint: the largest ones carry the answer
MAX_STACKS_READ = 64


def block_class(dev: DeviceTrace, rows: np.ndarray, roots: Sequence[str]) -> str | None:
    """The module class whose checkpointing frees `rows` (activations), read from the source
    (analysis.source_classes.repeated_block) of their largest stacks, weighted by bytes."""
    stacks = dev.alloc_stack[rows].astype(np.int64)
    ids, inverse = np.unique(stacks, return_inverse=True)
    sizes = np.bincount(inverse, weights=dev.alloc_size[rows].astype(np.float64))
    votes: dict[str, float] = {}
    for k in np.argsort(-sizes)[:MAX_STACKS_READ]:
        if ids[k] < 0:
            continue
        frames = [
            (f["filename"], f["line"], f["name"]) for f in dev.snapshot.stack_frames(int(ids[k]))
        ]
        cls = repeated_block(frames, roots)
        if cls is not None:
            votes[cls] = votes.get(cls, 0.0) + float(sizes[k])
    return max(votes, key=lambda c: votes[c]) if votes else None


def checkpoint_finding(
    dev: DeviceTrace,
    top: int,
    hide_patterns: Sequence[str] | None,
    source_roots: Sequence[str] = (),
) -> Finding | None:
    """`source_roots`: where to look for the program's source when the frames' own paths
    are not on this machine (advise --source-root, the current folder)."""
    if not dev.n_events:
        return None
    rows, _ = _live(dev)
    held = int(dev.alloc_size[rows].sum())
    if not held:
        return None
    sites = top_sites(dev, rows, top=top, hide_patterns=hide_patterns)
    cls = block_class(dev, rows, source_roots)
    which = (
        f"checkpointing every {cls} (memlens plan --what-if checkpoint={cls})"
        if cls
        else f"activation checkpointing of the modules that make them (the module of "
        f"{sites[0]['site']}: --source-root DIR names its class)"
    )
    return {
        "kind": "checkpoint",
        "summary": f"{len(rows):,} activations saved for backward hold {fb(held)} at the "
        f"peak; {which} would free up to that",
        "bytes": held,
        "certainty": "estimate",
        "covers": "the activation category (allocated outside backward, freed after a later "
        "backward event) live at the peak; each checkpointed module's input stays and one "
        "module's activations come back while its backward recomputes them",
        "sites": sites,
        "change": checkpoint_change(cls, frameworks(dev)),
        "knob": f"checkpoint={cls}" if cls else None,
    }


def autocast_finding(
    dev: DeviceTrace, top: int, hide_patterns: Sequence[str] | None
) -> Finding | None:
    if not dev.n_events or rows_matching(stack_matches(dev.snapshot, AUTOCAST), dev.alloc_stack).any():  # fmt: skip
        return None
    acts, kept = _live(dev)
    activations = int(dev.alloc_size[acts].sum())
    params = int(dev.alloc_size[kept].sum())
    saved = activations // 2 - params // 2
    if saved <= 0:
        return None
    return {
        "kind": "autocast",
        "summary": f"no autocast in the trace: {fb(activations)} of activations live at the "
        f"peak would take half in bf16, less {fb(params // 2)} of bf16 weight copies; "
        f"memlens plan --what-if autocast=bf16 (fp16 on cards without bf16) would save "
        f"about {fb(saved)}",
        "bytes": saved,
        "certainty": "estimate",
        "covers": "assumes fp32 activations and parameters (a snapshot has no dtypes): half "
        "the activation category live at the peak, less half the parameters live at the "
        "peak (the weight casts kept for backward); temporaries and gradients unchanged",
        "sites": top_sites(dev, acts, top=top, hide_patterns=hide_patterns),
        "change": autocast_change(),
        "knob": "autocast=bf16",
    }
