"""The estimates of `memlens advise` (see advise.py): figures read from what is live at the
active peak, under a stated assumption, never a replay.

attention: a hand-written attention materialises (B, H, S, S) matrices: the scores, the
  softmax of them (saved for backward), a mask or dropout of the same shape. They are
  found by the softmax: allocations made under a softmax frame, called from code named
  attention/attn (a frame or file), outside the fused SDPA kernels (flash, memory-
  efficient, cuDNN), give the sizes (those within 8x of the largest: the softmax's own
  (B, H, S) max and sum are S times smaller); every allocation live at the peak with one of those
  sizes and an attention frame in its stack is counted. `scaled_dot_product_attention`
  with a fused kernel keeps per-row statistics of B*H*S floats instead, negligible beside
  them, so their bytes are the estimate (the peak may move to another moment).
sharding: gradients and optimizer state live at the peak (analysis.categories) split over
  N ranks (ZeRO-2 / FSDP of gradients and state) leave 1/N per rank; parameters,
  activations and communication buckets are left as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.analysis.advise_changes import attention_change, sharding_change
from memlens.analysis.categories import GRADIENT, OPTIMIZER_STATE, categorize
from memlens.analysis.matching import rows_matching, stack_matches
from memlens.analysis.results import Finding
from memlens.analysis.sites import top_sites
from memlens.snapshot.model import DeviceTrace
from memlens.units import format_bytes as fb

# frame text is "filename:line:name"; log_softmax (cross-entropy) is not attention
SOFTMAX = r"[:.]_?softmax(?:_backward\w*)?(?:$|\()"
ATTENTION = r"(?i)attention|attn"
QUADRATIC_RATIO = 8
FUSED_SDPA = (
    r"_scaled_dot_product_(?:flash|efficient|cudnn)\w*attention|_(?:flash|efficient)_attention_"
)


def attention_rows(dev: DeviceTrace) -> np.ndarray:
    """Allocation rows live at the peak that are (B, H, S, S) attention matrices."""
    snap = dev.snapshot
    stacks = dev.alloc_stack
    in_attention = rows_matching(stack_matches(snap, ATTENTION), stacks)
    fused = rows_matching(stack_matches(snap, FUSED_SDPA), stacks)
    softmax = rows_matching(stack_matches(snap, SOFTMAX), stacks) & in_attention & ~fused
    if not softmax.any():
        return np.zeros(0, dtype=np.int64)
    sizes = np.unique(dev.alloc_size[softmax])
    # a softmax also makes its (B, H, S) max and sum: S times smaller than the matrices;
    # sizes within 8x of the largest allow an fp16 copy of an fp32 matrix and the like
    sizes = sizes[sizes * QUADRATIC_RATIO > sizes[-1]]
    live = dev.live_at_peak()
    quadratic = np.isin(dev.alloc_size[live], sizes)
    out: np.ndarray = live[quadratic & in_attention[live] & ~fused[live]]
    return out


def attention_finding(
    dev: DeviceTrace, top: int, hide_patterns: Sequence[str] | None
) -> Finding | None:
    rows = attention_rows(dev)
    if not len(rows):
        return None
    held = int(dev.alloc_size[rows].sum())
    sites = top_sites(dev, rows, top=top, hide_patterns=hide_patterns)
    return {
        "kind": "attention",
        "summary": f"{len(rows):,} attention matrices quadratic in the sequence hold "
        f"{fb(held)} at the peak; scaled_dot_product_attention (flash / memory-efficient) "
        "would not materialise them",
        "bytes": held,
        "certainty": "estimate",
        "covers": "allocations live at the peak sized like a softmax called from attention "
        "code; SDPA's own B*H*S statistics are not subtracted, and the peak may move",
        "sites": sites,
        "change": attention_change(sites[0]["site"] if sites else "the attention code"),
        "knob": "sdpa=efficient",  # runs in fp32 too, unlike flash
    }


def sharding_finding(
    dev: DeviceTrace,
    ranks: int,
    top: int,
    hide_patterns: Sequence[str] | None,
    block: str | None = None,
) -> Finding | None:
    """`block`: the repeated module class, when the checkpoint finding named one (the unit
    FSDP2 shards by)."""
    if ranks < 2 or not dev.n_events:
        return None
    cat, _ = categorize(dev)
    live = dev.live_at_peak()
    rows = live[np.isin(cat[live], (GRADIENT, OPTIMIZER_STATE))]
    held = int(dev.alloc_size[rows].sum())
    if not held:
        return None
    kept = -(-held // ranks)
    return {
        "kind": "sharding",
        "summary": f"gradients and optimizer state hold {fb(held)} at the peak; sharded "
        f"over {ranks} GPUs (ZeRO-2 / FSDP) each rank would keep {fb(kept)}",
        "bytes": held - kept,
        "certainty": "estimate",
        "covers": "the gradient and optimizer_state categories live at the peak, divided "
        "evenly; parameters, activations and communication buffers unchanged",
        "sites": top_sites(dev, rows, top=top, hide_patterns=hide_patterns),
        "change": sharding_change(ranks, block),
        "knob": f"fsdp2={ranks}",
    }
