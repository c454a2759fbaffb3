"""Categories (inferred from stacks and lifetimes) and compile contexts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from analysis_snapshots import BIG_SIZE, FWD, TRAIN, training_snapshot

import memlens
from memlens.analysis.categories import CATEGORIES, by_compile_context, categories, categorize
from memlens.errors import MemlensError
from snapshot_builders import MiB, block, ev, segment


@pytest.fixture(scope="module")
def dev():
    return memlens.load(training_snapshot()).device(0)


def test_every_allocation_category(dev):
    cat, names = categorize(dev)
    by_addr_event = {
        (int(dev.alloc_addr[r]), int(dev.alloc_event[r])): names[cat[r]]
        for r in range(dev.n_allocations)
    }
    assert by_addr_event == {
        (0x100000, -1): "parameter",  # ghost, alive throughout
        (0x100400, 0): "activation",  # freed after backward began
        (0x100800, 1): "temporary",  # freed before any backward event
        (0x100C00, 4): "gradient",  # made in backward, alive at the end
        (0x101000, 7): "other",  # forward, never freed
        (0x101400, 8): "optimizer_state",
        (0x100400, 9): "activation",
        (0x200000, 11): "temporary",
        (0x100800, 14): "autograd",  # made and freed in backward
        (0x101800, 19): "other",
        (0x101C00, 21): "other",
    }


def test_categories_at_peak_and_curves(dev):
    r = categories(dev, top=2)
    assert r["event"] == 11
    got = {c["name"]: (c["bytes"], c["peak_bytes"], c["peak_event"], c["allocated_bytes"])
           for c in r["categories"]}  # fmt: skip
    assert got == {
        "parameter": (1000, 1000, -1, 0),
        "gradient": (200, 200, 4, 200),
        "optimizer_state": (300, 300, 8, 300),
        "activation": (100, 100, 0, 200),
        "temporary": (BIG_SIZE, BIG_SIZE, 11, BIG_SIZE + 50),
        "autograd": (0, 30, 14, 30),
        "other": (10, 25, 21, 25),
    }
    assert sum(c["bytes"] for c in r["categories"]) == r["active_bytes"]
    curve = r["curve"]
    assert curve["event"] == list(range(22))  # small trace: every event sampled
    totals = [sum(curve["bytes"][n][i] for n in CATEGORIES) for i in range(22)]
    assert totals == dev.active_after.tolist()
    assert r["categories"][4]["top_sites"][0]["site"] == "forward (/home/u/model.py:20)"


def test_curves_keep_each_buckets_highest_value(dev):
    from memlens.analysis.curves import bucket_max

    assert bucket_max(np.array([5, 1, 9, 2, 7, 3]), np.array([0, 3, 5])).tolist() == [5, 9, 7]
    # two points (events 0 and 21): the large temporary of event 11 (freed at 13) is the
    # highest "temporary" of the bucket 1..21, though neither sampled event holds it
    curve = categories(dev, event=0, points=2, top=0)["curve"]
    assert curve["event"] == [0, 21]
    assert curve["bytes"]["temporary"] == [0, BIG_SIZE]
    # and what was alive at the end holds its highest too: gradient 200, state 300
    assert curve["bytes"]["gradient"][1] == 200 and curve["bytes"]["optimizer_state"][1] == 300


def test_overrides_come_first(dev):
    r = categories(dev, overrides=[("model", r"model\.py"), ("gradient", "MmBackward")])
    got = {c["name"]: c["bytes"] for c in r["categories"]}
    assert got["model"] == 100 + BIG_SIZE + 10 and got["temporary"] == 0
    assert got["gradient"] == 200
    with pytest.raises(MemlensError, match="bad regex"):
        categorize(dev, overrides=[("x", "(")])


def test_compile_context():
    snap = training_snapshot()
    for i, e in enumerate(snap["device_traces"][0]):
        e["compile_context"] = "Torch-Compiled Region: 0/0" if 9 <= i <= 13 else "N/A"
    r = by_compile_context(memlens.load(snap).device(0))
    assert r["has_context"] and r["event"] == 11
    got = {c["context"]: (c["bytes"], c["allocated_bytes"]) for c in r["contexts"]}
    assert got == {
        "Torch-Compiled Region: 0/0": (100 + BIG_SIZE, 100 + BIG_SIZE),
        "<before trace>": (1000, 0),
        "N/A": (510, 100 + 50 + 200 + 10 + 300 + 30 + 10 + 5),
    }


def test_real_categories_add_up(shared_snapshots_dir, expected_figures):
    for name, exp in expected_figures.items():
        dev = memlens.load(shared_snapshots_dir / name).device(exp["device"])
        r = categories(dev, top=0, points=50)
        assert sum(c["bytes"] for c in r["categories"]) == exp["peak_active_bytes"]
        if "fullstep" in name:
            got = {c["name"]: c["bytes"] for c in r["categories"]}
            # AdamW keeps two moments per parameter: twice the parameters' bytes
            assert abs(got["optimizer_state"] - 2 * got["parameter"]) < 0.01 * got["parameter"]
            assert got["gradient"] > 0


# --- optimizer state vs the step's scratch, by lifetime across steps ---------------------
# A hand-written AdamW (like cs336's): state["m"] is replaced at every step by a new tensor,
# and the old one is freed in the next step. Frames: the user's optimizer under
# torch.optim's step wrapper.
USER_OPT = {"filename": "/home/u/optim.py", "line": 76, "name": "step"}
OPT_WRAPPER = {
    "filename": "/usr/lib/python3.11/site-packages/torch/optim/optimizer.py",
    "line": 480,
    "name": "wrapper",
}
STEP = [USER_OPT, OPT_WRAPPER, TRAIN]
M0, M1, S1, A1, M2, S2, X = (0x100000 + 0x400 * k for k in range(7))


def replaced_state_snapshot(*, annotations: bool = True, gap: bool = True) -> dict[str, Any]:
    """Two optimizer steps; m is replaced in each (M0 made before the trace -> M1 -> M2).

    before the trace: M0 400 (the previous step's m)
      0 alloc X   10 FWD    (the recording starts in a forward) -> temporary
      1 free  X      FWD
    step 1 (annotation t=100..200)
      2 alloc M1 400 STEP   new m                 -> state (freed in step 2)
      3 alloc S1  50 STEP   scratch               -> temporary
      4 free  M0     STEP   old m                 -> state (made before the trace)
      5 free  S1     STEP
    forward (only with gap)
      6 alloc A1 100 FWD    -> temporary (no backward)
      7 free  A1     FWD
    step 2 (annotation t=400..500)
      8 alloc M2 400 STEP   new m, alive at the end -> state
      9 free  M1     STEP
     10 alloc S2  60 STEP   scratch               -> temporary
     11 free  S2     STEP
    """
    fc = "free_completed"
    trace = [ev("alloc", X, 10, 50, frames=FWD), ev(fc, X, 10, 60, frames=FWD),
             ev("alloc", M1, 400, 110, frames=STEP), ev("alloc", S1, 50, 120, frames=STEP),
             ev(fc, M0, 400, 130, frames=STEP), ev(fc, S1, 50, 140, frames=STEP)]  # fmt: skip
    if gap:
        trace += [ev("alloc", A1, 100, 300, frames=FWD), ev(fc, A1, 100, 310, frames=FWD)]
    trace += [ev("alloc", M2, 400, 410, frames=STEP), ev(fc, M1, 400, 420, frames=STEP),
              ev("alloc", S2, 60, 430, frames=STEP), ev(fc, S2, 60, 440, frames=STEP)]  # fmt: skip
    blocks = [block(M0, 1024, 1024, "inactive"), block(M1, 1024, 1024, "inactive"),
              block(S1, 1024, 1024, "inactive"), block(A1, 1024, 1024, "inactive"),
              block(M2, 1024, 400, "active_allocated", STEP),
              block(S2, 1024, 1024, "inactive"),
              block(X, MiB - 6 * 1024, MiB - 6 * 1024, "inactive")]  # fmt: skip
    snap: dict[str, Any] = {"segments": [segment(M0, blocks)], "device_traces": [trace]}
    if annotations:
        name = "Optimizer.step#AdamW.step"
        snap["external_annotations"] = [
            {"name": name, "stage": st, "device": 0, "time_us": 1000 + t}
            for st, t in (("START", 100), ("END", 200), ("START", 400), ("END", 500))
        ]
    return snap


def _by_addr_event(snap: dict[str, Any]) -> dict[tuple[int, int], str]:
    dev = memlens.load(snap).device(0)
    cat, names = categorize(dev)
    return {
        (int(dev.alloc_addr[r]), int(dev.alloc_event[r])): names[cat[r]]
        for r in range(dev.n_allocations)
    }


REPLACED = {
    (X, 0): "temporary",
    (M0, -1): "optimizer_state",
    (M1, 2): "optimizer_state",
    (S1, 3): "temporary",
    (A1, 6): "temporary",
    (M2, 8): "optimizer_state",
    (S2, 10): "temporary",
}


def test_state_replaced_every_step_is_state():
    assert _by_addr_event(replaced_state_snapshot()) == REPLACED
    r = categories(memlens.load(replaced_state_snapshot()).device(0), top=0)
    got = {c["name"]: (c["bytes"], c["peak_bytes"]) for c in r["categories"] if c["peak_bytes"]}
    # peak: after event 3, M0 + M1 + S1 = 850; M0 and M1 are state, S1 scratch; the
    # temporary curve's own peak is A1 (100) after event 6
    assert r["event"] == 3 and r["active_bytes"] == 850
    assert got == {"optimizer_state": (800, 800), "temporary": (50, 100)}


def test_steps_from_optimizer_calls_without_annotations():
    # no annotations: the forward's events between the two calls separate the steps
    assert _by_addr_event(replaced_state_snapshot(annotations=False)) == REPLACED


def test_back_to_back_steps_need_annotations():
    # nothing between the steps: the stacks cannot tell two calls from one, so M1 (made
    # and freed inside that one call) is scratch; the annotations do tell them apart
    expected = {k if k[1] < 6 else (k[0], k[1] - 2): v for k, v in REPLACED.items() if k[0] != A1}
    assert _by_addr_event(replaced_state_snapshot(gap=False)) == expected
    merged = _by_addr_event(replaced_state_snapshot(annotations=False, gap=False))
    assert merged == {**expected, (M1, 2): "temporary"}


def test_trace_beginning_inside_a_step():
    # the recording starts in the middle of an optimizer call: a block made before the
    # trace and freed in that same call may be its scratch (temporary); one freed in the
    # next call outlived a step (state)
    fc = "free_completed"
    trace = [ev(fc, M0, 400, 10, frames=STEP), ev("alloc", A1, 100, 20, frames=FWD),
             ev(fc, A1, 100, 30, frames=FWD), ev(fc, M1, 400, 40, frames=STEP)]  # fmt: skip
    blocks = [block(M0, 1024, 1024, "inactive"), block(M1, 1024, 1024, "inactive"),
              block(A1, MiB - 2048, MiB - 2048, "inactive")]  # fmt: skip
    snap = {"segments": [segment(M0, blocks)], "device_traces": [trace]}
    assert _by_addr_event(snap) == {
        (M0, -1): "temporary",
        (M1, -1): "optimizer_state",
        (A1, 1): "temporary",
    }


def test_real_categories_follow_the_models_shapes(shared_snapshots_dir):
    """wedson_medium_128_training.pickle: one recorded fp32 training step of cs336's
    BasicsTransformerLM (../shared/workloads/cs336_medium: vocab V=10,000, context S=128,
    d_model D=1024, d_ff F=4096, L=24 layers, H=16 heads, batch B=4; N = B*S = 512 tokens)
    with the hand-written AdamW (new m_t/v_t every step, the old ones freed in the next
    step). The peak is inside optimizer.step, at the first parameter (the embedding).

    Parameters: the embedding and lm_head V*D each; per layer q/k/v/output_proj 4*D*D,
    w1/w2/w3 3*D*F, two RMSNorm weights 2*D; the final RMSNorm D:
      P = 2*V*D + L*(4*D*D + 3*D*F + 2*D) + D = 423,183,360 parameters, fp32: 4*P bytes.
    Gradients: one per parameter, alive through the step: 4*P.
    AdamW state: m and v of every parameter (the previous step's, made before the trace)
    plus, at the peak, the new m_t and v_t of the first parameter (the embedding, V*D)
    while its old ones are still referenced: 2*4*P + 2*4*V*D.
    Activations: none at the peak (backward freed them all). Their own peak, as backward
    starts, is what autograd saves, read off the model's forward ops (all fp32):
      per layer, 10 (N, D) tensors (RMSNorm x*rms and weight*x, twice; RoPE'd Q and K;
      einsum's contiguous copy of V; the attention output made contiguous; the two
      residual sums), 5 (N, F) (w1 out, sigmoid, silu, w3 out, their product), 2
      (B, H, S, S) (softmax's exp and its quotient), rsqrt (N, 1) twice, the causal mask
      (S, S) bool, softmax's max indices (B, H, S) int64 and sum (B, H, S);
      plus the embedding output (N, D), the final RMSNorm (2 (N, D) + (N, 1)), and the
      loss: log_softmax's exp and the negated log-probabilities (2 (N, V)), max indices
      (N, 1) int64 and the sum's log input (N, 1).
    Each must be within 2%.
    """
    path = shared_snapshots_dir / "wedson_medium_128_training.pickle"
    if not path.exists():
        pytest.skip(f"{path.name} is absent")
    V, S, D, F, L, H, B = 10_000, 128, 1024, 4096, 24, 16, 4
    N = B * S
    P = 2 * V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D
    assert P == 423_183_360
    per_layer = (10 * N * D * 4 + 5 * N * F * 4 + 2 * B * H * S * S * 4 + 2 * N * 4
                 + S * S + B * H * S * 8 + B * H * S * 4)  # fmt: skip
    activations = L * per_layer + N * D * 4 + (2 * N * D * 4 + N * 4) + (2 * N * V * 4 + N * 12)
    expected = {
        "parameter": 4 * P,
        "gradient": 4 * P,
        "optimizer_state": 2 * 4 * P + 2 * 4 * V * D,
    }
    r = categories(memlens.load(path).device(0), top=0, points=50)
    got = {c["name"]: c for c in r["categories"]}
    for name, want in expected.items():
        assert abs(got[name]["bytes"] - want) <= 0.02 * want, name
    assert got["activation"]["bytes"] == 0
    assert abs(got["activation"]["peak_bytes"] - activations) <= 0.02 * activations
    # before the fix the old m/v (made before the trace, freed in the step) were temporary:
    # now the step's scratch is only line 80's three (V, D) temporaries
    assert got["temporary"]["bytes"] == 3 * V * D * 4
    # exact figures today: gradients, state and activations to the byte; the parameter
    # category also holds the RoPE cache (2*S*(D/H/2) fp32), the token/target index
    # tensors (int64: 5 warm-up + 1 recorded batch each) and two 8.125 MiB cuBLAS
    # workspaces (pre-Hopper: 4096*1024*2 + 16*1024*8 bytes; one per handle in use)
    rope, tokens, workspace = (
        2 * S * (D // H // 2) * 4,
        2 * 6 * N * 8,
        4096 * 1024 * 2 + 16 * 1024 * 8,
    )
    assert got["parameter"]["bytes"] == 4 * P + rope + tokens + 2 * workspace
    assert got["optimizer_state"]["bytes"] == expected["optimizer_state"]
    assert got["gradient"]["bytes"] == expected["gradient"]
    assert got["activation"]["peak_bytes"] == activations


def test_step_stage_names():
    from memlens.analysis.optimizer_steps import STEP_STAGE

    steps = ["Optimizer.step#AdamW.step", "optimizer step", "optimizer_step", "Optimizer.step",
             "step optimizer", "opt-step"]  # fmt: skip
    others = ["Optimizer.zero_grad#AdamW.zero_grad", "ProfilerStep#3", "forward", "backward pass"]
    assert [bool(STEP_STAGE.search(s)) for s in steps] == [True] * 5 + [False]
    assert not any(STEP_STAGE.search(s) for s in others)
