"""Categories of memory: parameter, gradient, optimizer_state, activation, temporary,
autograd (internals), other — inferred from allocation stacks and lifetimes.

Rules, first match wins (docs/analyses.md has the long form; the regexes are below):
  0. user overrides: (category, regex) pairs matched over the allocation's frames;
  1. gradient: allocated under autograd's AccumulateGrad;
  2. optimizer_state: allocated in an optimizer step (torch/optim frames, zero_grad
     excluded) and outliving that step: alive at the end, or freed in another step (m and
     v replaced at every step), or made before the trace and freed in a step that began
     inside it. temporary: made and freed inside one step (its scratch). A step is an
     optimizer-step stage (annotation) or else one optimizer call (analysis.optimizer_steps);
  3. gradient: allocated in backward (autograd engine / a Backward node) and alive at the
     end, or freed under the optimizer (zero_grad); made before the trace and freed by
     zero_grad;
  4. autograd: allocated in backward and freed (intermediate gradients, engine buffers);
  5. parameter: alive for the whole window (before the first event to after the last), or
     made during module construction / .to() / init and alive at the end;
  6. activation: allocated outside backward, freed after a backward event that follows
     its allocation (saved for backward);
  7. temporary: allocated and freed inside the trace, none of the above;
  8. other: everything else (inputs, outputs, state still alive at the end, ...).
Also: memory by compile context (torch.compile regions).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memlens.analysis.curves import group_summary, group_totals
from memlens.analysis.events import event_info
from memlens.analysis.inferred_steps import BACKWARD, OPTIMIZER, ZERO_GRAD
from memlens.analysis.matching import rows_matching, stack_matches
from memlens.analysis.optimizer_steps import step_of_events
from memlens.analysis.results import (
    CategoriesOutput,
    CategoriesResult,
    CompileContexts,
    ContextRow,
)
from memlens.errors import MemlensError
from memlens.snapshot.model import LIVE_AT_END, PREEXISTING, DeviceTrace

CATEGORIES: tuple[str, ...] = (
    "parameter",
    "gradient",
    "optimizer_state",
    "activation",
    "temporary",
    "autograd",
    "other",
)
(PARAMETER, GRADIENT, OPTIMIZER_STATE, ACTIVATION, TEMPORARY, AUTOGRAD, OTHER) = range(7)

# Frame patterns (searched in "filename:line:name").
ACCUMULATE_GRAD = r"AccumulateGrad|accumulate_grad"
# BACKWARD, OPTIMIZER, ZERO_GRAD: inferred_steps' (steps are read from the same frames)
CONSTRUCTION = (
    r"[/\\]torch[/\\]nn[/\\]modules[/\\]module\.py:\d+:(_apply|to|cuda|load_state_dict)$|"
    r"[/\\]torch[/\\]nn[/\\]init\.py|:reset_parameters$|[/\\]torch[/\\]nn[/\\]parameter\.py"
)


def categorize(
    dev: DeviceTrace, *, overrides: Sequence[tuple[str, str]] | None = None
) -> tuple[np.ndarray, list[str]]:
    """(category index of every allocation row, category names). Names are CATEGORIES
    followed by any new names the overrides introduce."""
    snap = dev.snapshot
    names = list(CATEGORIES)
    n = dev.n_events
    stacks = dev.alloc_stack
    cat = np.full(dev.n_allocations, -1, dtype=np.int64)

    def assign(mask: np.ndarray, c: int) -> None:
        cat[(cat < 0) & mask] = c

    for cname, pattern in overrides or ():
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise MemlensError(
                f"category override {cname!r}: bad regex {pattern!r}: {exc}"
            ) from None
        if cname not in names:
            names.append(cname)
        assign(rows_matching(stack_matches(snap, rx), stacks), names.index(cname))

    alive_end = (dev.alloc_flags & LIVE_AT_END) != 0
    freed = dev.free_event < n
    pre = (dev.alloc_flags & PREEXISTING) != 0
    in_bw_stack = stack_matches(snap, BACKWARD)
    in_opt_stack = stack_matches(snap, OPTIMIZER)
    in_zero_grad = stack_matches(snap, ZERO_GRAD)
    bw = rows_matching(in_bw_stack, stacks)
    # who freed it: the stack of the free event (free-site stack with context='all')
    free_stack = np.full(dev.n_allocations, -1, dtype=np.int64)
    free_stack[freed] = dev.stack[dev.free_event[freed]]
    assign(rows_matching(stack_matches(snap, ACCUMULATE_GRAD), stacks), GRADIENT)
    in_step_stack = in_opt_stack & ~in_zero_grad
    step = rows_matching(in_step_stack, stacks)
    scratch = _step_scratch(dev, in_step_stack, pre, freed)
    assign(step & ~scratch & (alive_end | ~bw), OPTIMIZER_STATE)
    assign(step & ~bw, TEMPORARY)
    freed_by_opt = rows_matching(in_opt_stack, free_stack)
    assign(pre & rows_matching(in_zero_grad, free_stack), GRADIENT)
    assign(bw & (alive_end | freed_by_opt), GRADIENT)
    assign(bw, AUTOGRAD)
    assign(pre & alive_end, PARAMETER)
    assign(rows_matching(stack_matches(snap, CONSTRUCTION), stacks) & alive_end, PARAMETER)
    # activation: a backward event happens between its alloc and its free
    ev_bw = rows_matching(in_bw_stack, dev.stack.astype(np.int64))
    next_bw = _next_true(ev_bw)  # next_bw[i] = first backward event at or after i
    after = np.minimum(np.maximum(dev.alloc_event + 1, 0), n)
    nb = np.concatenate([next_bw, [n]])[after]
    assign(freed & ~pre & (nb < dev.free_event), ACTIVATION)
    assign(freed & ~pre, TEMPORARY)
    assign(np.ones(len(cat), dtype=bool), OTHER)
    return cat, names


def _step_scratch(
    dev: DeviceTrace, step_stack: np.ndarray, pre: np.ndarray, freed: np.ndarray
) -> np.ndarray:
    """Per allocation: made and freed inside the same optimizer step. One made before the
    trace counts as made in the step already running at the first event (if any)."""
    step_of, open_at_start = step_of_events(dev, step_stack)
    n = dev.n_events
    made_in = np.full(dev.n_allocations, -1, dtype=np.int64)
    made = dev.alloc_event >= 0
    made_in[made] = step_of[dev.alloc_event[made]]
    made_in[pre] = open_at_start
    freed_in = np.full(dev.n_allocations, -2, dtype=np.int64)
    freed_in[freed] = step_of[np.minimum(dev.free_event[freed], n - 1)]
    scratch: np.ndarray = (made_in >= 0) & (made_in == freed_in)
    return scratch


def _next_true(mask: np.ndarray) -> np.ndarray:
    n = len(mask)
    idx = np.where(mask, np.arange(n), n)
    return np.minimum.accumulate(idx[::-1])[::-1] if n else idx


def categories(
    dev: DeviceTrace,
    *,
    event: int | None = None,
    overrides: Sequence[tuple[str, str]] | None = None,
    points: int = 400,
    hide_patterns: Sequence[str] | None = None,
    top: int = 3,
) -> CategoriesResult:
    """Bytes per category at `event` (default: the peak) and over time.

    Returns {"device", "event", "time_us", "action", "active_bytes", "reserved_bytes",
    "categories": [{"name", "bytes" (live at the event), "count", "peak_bytes",
    "peak_event", "allocated_bytes" (total allocated in the trace), "allocated_count",
    "top_sites" (at the event)}], "curve": {"event": [...], "bytes": {name: [...]}}}.
    Categories are listed in CATEGORIES order (then override names), empty ones included.
    """
    event = dev.peak_event_index if event is None else int(event)
    cat, names = categorize(dev, overrides=overrides)
    items, curve = group_summary(
        dev, cat, names, event=event, points=points, top=top, hide_patterns=hide_patterns
    )
    return {"device": dev.device, **event_info(dev, event), "categories": items, "curve": curve}


def by_compile_context(dev: DeviceTrace, *, event: int | None = None) -> CompileContexts:
    """Bytes per compile context at `event` (default: the peak) and allocated over the
    trace. Allocations made before the trace have no context ("<before trace>"); "N/A"
    is outside any compiled region (or compile_context was not recorded).

    Returns {"device", "event", "has_context" (any event recorded one), "contexts":
    [{"context", "bytes", "count", "allocated_bytes", "allocated_count"}]} (largest
    bytes at the event first, then allocated).
    """
    snap = dev.snapshot
    event = dev.peak_event_index if event is None else int(event)
    ctx = np.full(dev.n_allocations, -2, dtype=np.int64)
    made = dev.alloc_event >= 0
    ctx[made] = dev.compile_context[dev.alloc_event[made]]
    uniq, inv = np.unique(ctx, return_inverse=True)
    totals = group_totals(dev, inv, len(uniq), event)
    live_b, live_c = totals["bytes"], totals["count"]
    all_b, all_c = totals["allocated_bytes"], totals["allocated_count"]

    def label(c: int) -> str:
        if c == -2:
            return "<before trace>"
        if c == -1:
            return "N/A"
        return snap.strings[c]

    items: list[ContextRow] = [
        {
            "context": label(int(c)),
            "bytes": int(live_b[j]),
            "count": int(live_c[j]),
            "allocated_bytes": int(all_b[j]),
            "allocated_count": int(all_c[j]),
        }
        for j, c in enumerate(uniq.tolist())
    ]
    items.sort(key=lambda d: (-d["bytes"], -d["allocated_bytes"], d["context"]))
    return {
        "device": dev.device,
        "event": event,
        "has_context": bool(np.any(dev.compile_context >= 0)),
        "contexts": items,
    }


def override_pairs(overrides: Sequence[str], rules_path: str | None) -> list[tuple[str, str]]:
    """`memlens categories`' --rules file then --override CATEGORY=REGEX, as (category,
    regex) pairs in order."""
    pairs: list[tuple[str, str]] = []
    if rules_path:
        from memlens.analysis.rules import load_rules

        pairs += [(r.name, r.pattern) for r in load_rules(rules_path)]
    for o in overrides:
        if "=" not in o:
            raise MemlensError(f"--override wants CATEGORY=REGEX, got {o!r}")
        k, v = o.split("=", 1)
        pairs.append((k.strip(), v))
    return pairs


def check_overrides(options: Mapping[str, Any]) -> None:
    override_pairs(options["overrides"], options["rules_path"])


def categories_output(
    dev: DeviceTrace,
    *,
    event: int | None = None,
    overrides: Sequence[str] = (),
    rules_path: str | None = None,
    points: int = 400,
    hide_patterns: Sequence[str] | None = None,
) -> CategoriesOutput:
    """`memlens categories`: categories() and by_compile_context() at the same event."""
    result = categories(
        dev,
        event=event,
        overrides=override_pairs(overrides, rules_path),
        points=points,
        hide_patterns=hide_patterns,
    )
    contexts = by_compile_context(dev, event=result["event"])
    return {**result, "compile_contexts": contexts}
