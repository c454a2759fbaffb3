"""The statistics' definitions, both paths (raw in numpy, reduced with torch on the device),
against values computed directly with torch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from inspect_helpers import direct  # noqa: E402
from torch import Tensor  # noqa: E402

from memlens.inspector import stats as S  # noqa: E402
from memlens.inspector.reduce import prepare, reduce_packed  # noqa: E402

BINS = 32


def direct_hist(t: Tensor, bins: int = BINS) -> tuple[npt.NDArray[np.int64], float, float]:
    x = t.detach().double().reshape(-1)
    x = x[torch.isfinite(x)]
    lo, hi = x.min(), x.max()
    idx = torch.floor((x - lo) * (bins / (hi - lo))).clamp(0, bins - 1).long()
    return torch.bincount(idx, minlength=bins).numpy(), lo.item(), hi.item()


def via(t, *, raw: bool | str, chunk=1 << 22, size=8):
    if raw == "torch":  # the reduction used on accelerators, run here on the CPU
        packed, nchunks, heat = reduce_packed(t, bins=BINS, heatmap_size=size, chunk_numel=chunk)
        return S.unpack_reduced(packed.numpy(), nchunks, BINS, heat)
    p = prepare(
        t, bins=BINS, heatmap_size=size, raw_max_numel=(1 << 30) if raw else 0, chunk_numel=chunk
    )
    payload = p.payload()
    if payload[0] == "raw":
        return S.summarize_array(payload[1], bins=BINS, heatmap_size=size)
    return S.unpack_reduced(payload[1], payload[2], BINS, payload[3])


def assert_stats(got: dict[str, Any], want: dict[str, Any]):
    for k in S.STAT_NAMES:
        if math.isnan(want[k]):
            assert math.isnan(got[k]), k
        else:
            assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), k


CASES = {
    "normal_2d": lambda g: torch.randn(37, 53, generator=g),
    "relu_4d": lambda g: torch.relu(torch.randn(2, 3, 9, 11, generator=g)),
    "offset_1d": lambda g: 1000 + torch.randn(5000, generator=g),  # a large mean: cancellation
    "half": lambda g: torch.randn(64, 40, generator=g).half(),
    "bfloat16": lambda g: torch.randn(3, 64, 40, generator=g).bfloat16(),
    "int": lambda g: torch.randint(-5, 5, (17, 9), generator=g),
    "constant": lambda g: torch.full((6, 7), 2.5),
}


@pytest.mark.parametrize("raw", [True, False, "torch"], ids=["raw", "reduced", "torch"])
@pytest.mark.parametrize("name", list(CASES))
def test_stats_match_direct(name, raw):
    t = CASES[name](torch.Generator().manual_seed(1))
    got = via(t, raw=raw, chunk=257)  # several chunks on the reduced path
    assert_stats(got, direct(t))
    if name != "constant":
        counts, lo, hi = direct_hist(t)
        assert got["hist"].tolist() == counts.tolist()
        assert (got["hist_lo"], got["hist_hi"]) == (lo, hi)
    else:
        assert got["hist"][0] == t.numel() and got["hist"][1:].sum() == 0
    assert got["hist"].sum() == t.numel()


@pytest.mark.parametrize("raw", [True, False, "torch"], ids=["raw", "reduced", "torch"])
def test_nan_inf_are_counted_and_excluded(raw):
    t = torch.randn(20, 30, generator=torch.Generator().manual_seed(2))
    t[0, :3] = float("nan")
    t[1, 4] = float("inf")
    t[2, 5] = -float("inf")
    t[3, :7] = 0
    got = via(t, raw=raw, chunk=100)
    want = direct(t)
    assert want["nan"] == 3 and want["inf"] == 2
    assert_stats(got, want)
    assert got["hist"].sum() == t.numel() - 5


@pytest.mark.parametrize("raw", [True, False, "torch"], ids=["raw", "reduced", "torch"])
def test_all_nan(raw):
    t = torch.full((10, 10), float("nan"))
    got = via(t, raw=raw)
    assert got["nan"] == 100 and got["norm"] == 0
    assert math.isnan(got["mean"]) and math.isnan(got["hist_lo"])
    assert got["hist"].sum() == 0


@pytest.mark.parametrize("raw", [True, False, "torch"], ids=["raw", "reduced", "torch"])
@pytest.mark.parametrize("shape", [(37, 53), (5, 6), (2, 3, 30, 20), (100, 3)])
def test_heatmap_is_adaptive_avg_pool_of_leading_slice(shape, raw):
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    got = via(t, raw=raw, size=8)["heatmap"]
    src = t[(0,) * (t.dim() - 2)].double()
    oh, ow = min(src.shape[0], 8), min(src.shape[1], 8)
    want = F.adaptive_avg_pool2d(src[None, None], (oh, ow))[0, 0].numpy()
    assert got.shape == (oh, ow)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_no_heatmap_for_1d_and_scalars():
    assert via(torch.randn(50), raw=True)["heatmap"] is None
    assert via(torch.randn(50), raw=False)["heatmap"] is None
    assert via(torch.tensor(3.0), raw=True)["heatmap"] is None


def test_raw_copy_is_a_snapshot():
    """The raw path copies at capture time: a later in-place change must not leak in."""
    t = torch.ones(4, 4)
    p = prepare(t, bins=BINS, heatmap_size=8, raw_max_numel=1000, chunk_numel=100)
    t.zero_()
    assert p.payload()[1].sum() == 16


def test_combine_of_chunks_equals_whole():
    a = np.random.default_rng(0).normal(5, 3, size=10_000)
    whole = S.combine(S.partials_from_array(a))
    parts = np.concatenate([S.partials_from_array(c) for c in np.array_split(a, 7)])
    split = S.combine(parts)
    for k in S.STAT_NAMES:
        assert split[k] == pytest.approx(whole[k], rel=1e-12)


def test_histogram_of_a_strided_subset_keeps_the_total():
    a = np.random.default_rng(4).normal(size=300_001).astype(np.float32)
    packed, n, heat = S.reduce_array(a, bins=BINS, heatmap_size=0, hist_max_numel=1 << 12)
    got = S.unpack_reduced(packed, n, BINS, heat)
    exact = S.summarize_array(a, bins=BINS, heatmap_size=0)
    assert got["hist"].sum() == a.size
    assert np.abs(got["hist"] - exact["hist"]).sum() < 0.1 * a.size  # same shape
    for k in S.STAT_NAMES:  # everything else stays exact
        assert got[k] == pytest.approx(exact[k], rel=1e-12)
