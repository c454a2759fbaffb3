"""`memlens advise`'s weight-casts finding (analysis/advise_casts.py): half-size copies of
fp32 weights that autocast's cast cache holds at the peak; hand-built forwards that have
them and do not, and the shared mixed-precision recording. Figures by hand."""

from __future__ import annotations

from typing import Any

import pytest

import memlens
from memlens.analysis.advise import advise
from memlens.analysis.advise_casts import weight_cast_rows
from memlens.planning.verify import knob_for
from shared_data import SHARED_SNAPSHOTS
from snapshot_builders import MiB, block, ev, segment

S1, S2 = 0x10000000, 0x20000000
KiB = 1024
CAST = {"filename": "??", "line": 0, "name": "at::autocast::cached_cast(c10::ScalarType, x)"}
BWD = [{"filename": "??", "line": 0, "name": "torch::autograd::Engine::evaluate_function(x)"}]
USER = [{"filename": "/home/u/train.py", "line": 7, "name": "step"}]


def fwd(line: int, cast: bool) -> list[dict[str, Any]]:
    return [*([CAST] if cast else []), {"filename": "/home/u/model.py", "line": line,
                                        "name": "forward"}]  # fmt: skip


def forward(
    named: bool = True, activation_cast: bool = False, backward: bool = False,
    only_small: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Parameters W1, W2 (2 MiB each) and W3 (1 MiB), alive before and after the trace
    (5 MiB). A forward under autocast casts them: C1, C2 (1 MiB, model.py:20 and :22) and
    C3 (512 KiB, model.py:23), with a cached_cast frame when `named`. `activation_cast`
    adds X (768 KiB, model.py:21: no parameter is 1.5 MiB) and C4 (1 MiB, model.py:24: a
    third 1 MiB cast with two 2 MiB parameters), casts the backward keeps. The peak is
    the last alloc; then the region exits and frees the copies (by a backward node when
    `backward`, after a gradient G made in backward). `only_small`: C3 alone."""
    c1, x, c2, c3, c4, g = (S2 + o * MiB for o in range(6))
    allocs = [(c3, 512 * KiB, 23)] if only_small else [(c1, MiB, 20), (c2, MiB, 22), (c3, 512 * KiB, 23)]  # fmt: skip
    if activation_cast:
        allocs[1:1] = [(x, 768 * KiB, 21)]
        allocs.append((c4, MiB, 24))
    trace = [ev("alloc", a, n, t, frames=fwd(line, named)) for t, (a, n, line) in enumerate(allocs)]
    t = len(trace)
    if backward:
        trace.append(ev("alloc", g, 512, t, frames=BWD))
    end = BWD if backward else USER
    trace += [ev("free_completed", a, n, t + 1 + i, frames=end) for i, (a, n, _) in enumerate(allocs)]  # fmt: skip
    params = [block(S1 + o * MiB, n, n, "active_allocated", USER)
              for o, n in ((0, 2 * MiB), (2, 2 * MiB), (4, MiB))]  # fmt: skip
    return {
        "segments": [segment(S1, params, segment_type="large"),
                     segment(S2, [block(S2, 20 * MiB, 0, "inactive")], segment_type="large")],
        "device_traces": [trace],
    }  # fmt: skip


def finding(snapshot: dict[str, Any]) -> dict[str, Any] | None:
    dev = memlens.load(snapshot).device(0)
    found = [f for f in advise(dev)["findings"] if f["kind"] == "weight_casts"]
    return dict(found[0]) if found else None


def test_copies_kept_for_backward_are_their_bytes():
    # C1 + C2 + C3 = 2.5 MiB pair with W1, W2, W3; X and C4 are casts that pair with
    # nothing (C4: the two 2 MiB parameters have their copies, the earliest): the graph
    # keeps casts at the peak, so the backward keeps the copies too
    f = finding(forward(activation_cast=True))
    assert f is not None
    assert (f["bytes"], f["certainty"]) == (2 * MiB + 512 * KiB, "estimate")
    assert f["summary"].startswith("3 half-size copies of fp32 weights (autocast's cast cache) "
                                   "hold 2.50 MiB at the peak")  # fmt: skip
    assert "cache_enabled=False) would not free them" in f["summary"]
    assert "named by their at::autocast::cached_cast frames" in f["covers"]
    assert [(s["site"], s["bytes"]) for s in f["sites"]] == [
        ("forward (/home/u/model.py:20)", MiB), ("forward (/home/u/model.py:22)", MiB),
        ("forward (/home/u/model.py:23)", 512 * KiB)]  # fmt: skip


def test_copies_freed_after_a_backward_event_are_kept_for_it():
    dev = memlens.load(forward(backward=True)).device(0)
    rows, named, kept = weight_cast_rows(dev)
    assert (len(rows), named, kept) == (3, True, True)


def test_copies_the_cache_alone_holds_are_their_bytes_less_the_largest():
    # named casts, none of an activation live, no backward: an inference forward;
    # cache_enabled=False frees each after its op: 2.5 MiB - 1 MiB
    f = finding(forward())
    assert f is not None and f["bytes"] == MiB + 512 * KiB
    assert "--what-if autocast_cache=false) would free each after its op" in f["summary"]
    assert "if no backward keeps them" not in f["summary"]
    assert knob_for(f) == ("autocast_cache=false", "active", "")  # type: ignore[arg-type]


def test_without_cpp_frames_the_sizes_pair_and_the_finding_says_it_is_unsure():
    f = finding(forward(named=False))
    assert f is not None and f["bytes"] == MiB + 512 * KiB
    assert "if no backward keeps them (the trace shows none" in f["summary"]
    assert "no C++ frames in the trace" in f["covers"]


@pytest.mark.parametrize("named", [True, False])
def test_no_finding_without_copies(named):
    # named: only C3, 512 KiB less its own size (the largest) = 0 bytes: no finding;
    # unnamed: 512 KiB copies stand for 1 MiB of the 5 MiB of parameters (< half): an fp32
    # tensor that happens to be half a parameter's size
    assert finding(forward(named=named, only_small=True)) is None
    dev = memlens.load(forward(named=False, only_small=True)).device(0)
    assert len(weight_cast_rows(dev)[0]) == 0


MIXED = SHARED_SNAPSHOTS / "cs336_memory_ctx128_forward_mixed.pickle"


@pytest.mark.skipif(not MIXED.exists(), reason="../shared/snapshots is absent")
def test_the_shared_mixed_precision_forward():
    """290 bf16 copies of the model's fp32 weights, each made under cached_cast at
    transformer.py:22 (the Linear's einsum: 128 of 13,107,200 bytes, 96 of 52,428,800 and
    the 51,200,000-byte output projection) and :57 (65 norm weights of 5,120 bytes),
    alive at the peak (event 5,989 of 5,992): 6,762,419,200 bytes, half the parameters they
    copy. 226 casts of activations are alive too: the graph keeps them (grad on)."""
    dev = memlens.load(MIXED, warn=False).device(0)
    rows, named, kept = weight_cast_rows(dev)
    assert (len(rows), named, kept) == (290, True, True)
    f = finding_of(dev)
    assert f["bytes"] == 128 * 13_107_200 + 96 * 52_428_800 + 51_200_000 + 65 * 5_120
    assert f["bytes"] == 6_762_419_200
    assert [(s["site"].rsplit("/", 1)[-1], s["bytes"]) for s in f["sites"]] == [
        ("transformer.py:22)", 6_762_086_400),
        ("transformer.py:57)", 332_800),
    ]


def finding_of(dev: Any) -> dict[str, Any]:
    (f,) = [f for f in advise(dev)["findings"] if f["kind"] == "weight_casts"]
    return dict(f)
