"""PyTorch's MemTracker / FSDPMemTracker as the simulate tests run them inside a simulated
script (llama_script.py, torchtitan_tracked.py): their peak, and the rule FSDPMemTracker
lacks for `flex_attention`.

The trackers are dispatch modes without `supports_higher_order_operators`: a
higher-order op reaching one stops with "no rule registered for HigherOrderOperator"
(on a GPU too). `add_flex_attention_rules` registers, for the tracker's class only,
`flex_attention` and `flex_attention_backward` as what the HOP itself does without a
compiler: its dense (CompositeExplicitAutograd) implementation, run with the tracker
active again, so every op of it is counted as any other op. This is what the
simulation runs for an eager flex_attention (simulation/patches/higher_order.py) and
what torch runs on a GPU when flex_attention is not compiled. It is test-harness code,
not memlens's and not PyTorch's.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch._C import DispatchKey
from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward
from torch._ops import HigherOrderOperator


def _dense_under_the_tracker(hop: HigherOrderOperator, mode: Any, *args: Any, **kwargs: Any) -> Any:
    # HigherOrderOperator.dispatch has popped `mode` to call this; push it back
    dense = hop.py_kernels[DispatchKey.CompositeExplicitAutograd]
    with mode, torch._C._AutoDispatchBelowAutograd():
        return dense(*args, **kwargs)


def add_flex_attention_rules(tracker_class: type) -> None:
    for hop in (flex_attention, flex_attention_backward):
        if tracker_class not in hop.python_key_table:
            hop.py_impl(tracker_class)(partial(_dense_under_the_tracker, hop))


def tracker_peak(tracker: Any) -> int:
    """The tracker's peak: the largest total over the devices' peak snapshots."""
    peaks = tracker.get_tracker_snapshot("peak")
    return max(int(snap["Total"]) for snap in peaks.values())


def peak_by_kind(tracker: Any) -> dict[str, int]:
    """The peak snapshot's non-zero bytes by device and kind ("cuda:0:Activation")."""
    peaks = tracker.get_tracker_snapshot("peak")
    return {f"{dev}:{k}": int(v) for dev, snap in peaks.items() for k, v in snap.items() if v}
