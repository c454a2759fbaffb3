"""Exact geometry of the level-of-detail layout (memlens.views.layout)."""

from __future__ import annotations

import numpy as np
import pytest
from view_fixtures import small_snapshot

import memlens
from memlens.simulation.synthetic import generate_snapshot
from memlens.views.layout import MAX_DETAIL_RUNS, DeviceLayout, LiveIndex, RangeArgmax


@pytest.fixture
def lay() -> DeviceLayout:
    return DeviceLayout(memlens.load(small_snapshot()).device(0))


def bands(v) -> dict[int, list[tuple[int, int]]]:
    """row -> [(column, offset)] from a View."""
    out = {}
    for k, (r, c0, c1) in enumerate(zip(v.band_rows, v.band_c0, v.band_c1)):
        i0, i1 = int(v.run_start[k]), int(v.run_start[k + 1])
        assert v.run_col[i0] == c0  # a band's first run starts at its first column
        ends = [*v.run_col[i0 + 1 : i1].tolist(), int(c1)]
        out[int(r)] = [
            (c, int(v.run_off[i]))
            for i, end in zip(range(i0, i1), ends, strict=True)
            for c in range(int(v.run_col[i]), end)
        ]
        # runs are maximal: neighbours differ
        assert all(v.run_off[i] != v.run_off[i + 1] for i in range(i0, i1 - 1))
    return out


def test_one_event_per_column_every_allocation_drawn(lay):
    v = lay.view(lay.event_bounds(0, 7, 7), height=100)  # ymax 1000 -> 10 bytes per pixel
    assert v.bounds.tolist() == list(range(8))
    assert v.sample.tolist() == list(range(7))
    assert v.active.tolist() == [0, 100, 110, 410, 400, 300, 350]
    assert v.reserved.tolist() == [1000] * 7
    assert v.ymax == 1000 and v.bytes_per_px == 10
    assert bands(v) == {
        0: [(1, 0), (2, 0), (3, 0), (4, 0)],  # A
        1: [(2, 100), (3, 100)],  # B sits on A
        2: [(3, 110), (4, 100), (5, 0), (6, 0)],  # C slides down as B then A go
        3: [(6, 300)],  # D on top of C
    }
    assert v.small_bytes.tolist() == [0] * 7
    assert v.small_offset.tolist() == v.active.tolist()


def test_allocations_under_a_pixel_become_the_aggregate_band(lay):
    v = lay.view(lay.event_bounds(0, 7, 7), height=20)  # 50 bytes per pixel: B (10) is small
    assert v.bytes_per_px == 50
    assert bands(v) == {
        0: [(1, 0), (2, 0), (3, 0), (4, 0)],
        2: [(3, 100), (4, 100), (5, 0), (6, 0)],
        3: [(6, 300)],
    }
    assert v.small_offset.tolist() == [0, 100, 100, 400, 400, 300, 350]
    assert v.small_bytes.tolist() == [0, 0, 10, 10, 0, 0, 0]
    assert v.small_count.tolist() == [0, 0, 1, 1, 0, 0, 0]
    # nothing dropped: big + aggregate is the active total in every column
    assert (v.small_offset + v.small_bytes).tolist() == v.active.tolist()


def test_y_zoom_sets_the_pixel_threshold(lay):
    # 200 bytes over 20 pixels: 10 bytes per pixel, so B (10 bytes) gets its own band again
    v = lay.view(lay.event_bounds(0, 7, 7), height=20, ymin=300, ymax=500)
    assert (v.ymax, v.bytes_per_px) == (500, 10)
    assert sorted(bands(v)) == [0, 1, 2, 3]
    assert v.small_bytes.tolist() == [0] * 7


# 2 pixels for 1000 bytes: 500 bytes a pixel, so A (100), B (10), C (300), D (50) are all
# under a pixel; one event per column, A lives in columns 1-4, B 2-3, C 3-6, D 6
SUB_PIXEL = dict(height=2)


def test_sub_pixel_allocations_are_aggregated_at_min_px_one(lay):
    v = lay.view(lay.event_bounds(0, 7, 7), **SUB_PIXEL)
    assert v.bytes_per_px == 500 and bands(v) == {}
    assert v.small_offset.tolist() == [0] * 7
    assert v.small_bytes.tolist() == v.active.tolist() == [0, 100, 110, 410, 400, 300, 350]
    assert v.small_count.tolist() == [0, 1, 2, 3, 2, 1, 2]
    assert v.small_max == 499  # everything under a pixel


def test_sub_pixel_allocations_down_to_min_px_become_bands(lay):
    v = lay.view(lay.event_bounds(0, 7, 7), **SUB_PIXEL, min_px=1 / 64)  # 7.8 bytes
    assert bands(v) == {
        0: [(1, 0), (2, 0), (3, 0), (4, 0)],
        1: [(2, 100), (3, 100)],
        2: [(3, 110), (4, 100), (5, 0), (6, 0)],
        3: [(6, 300)],
    }
    assert v.small_offset.tolist() == v.active.tolist()
    assert v.small_bytes.tolist() == [0] * 7 and v.small_count.tolist() == [0] * 7
    assert v.small_max == 7
    # 1/16 of a pixel is 31.25 bytes: B (10) stays in the aggregate band, above C
    v = lay.view(lay.event_bounds(0, 7, 7), **SUB_PIXEL, min_px=1 / 16)
    assert sorted(bands(v)) == [0, 2, 3] and bands(v)[2][0] == (3, 100)
    assert v.small_offset.tolist() == [0, 100, 100, 400, 400, 300, 350]
    assert v.small_bytes.tolist() == [0, 0, 10, 10, 0, 0, 0]
    assert v.small_max == 31


def test_run_budget_keeps_the_largest_first(lay):
    b = lay.event_bounds(0, 7, 7)
    # 8 runs at most: C (300 bytes, 4 segments) then A (100, 4); D (50, 1) would pass
    v = lay.view(b, **SUB_PIXEL, min_px=1 / 64, max_runs=8, max_work=8)
    assert bands(v) == {
        0: [(1, 0), (2, 0), (3, 0), (4, 0)],
        2: [(3, 100), (4, 100), (5, 0), (6, 0)],  # B is aggregated: C sits right on A
    }
    assert v.small_offset.tolist() == [0, 100, 100, 400, 400, 300, 300]
    assert v.small_bytes.tolist() == [0, 0, 10, 10, 0, 0, 50]  # B, then D
    assert v.small_count.tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert v.small_max == 50  # D, the largest left out
    # 7 runs: C only; the cut is by size, so D (which would fit) is not taken after A
    v = lay.view(b, **SUB_PIXEL, min_px=1 / 64, max_runs=7, max_work=7)
    assert bands(v) == {2: [(3, 0), (4, 0), (5, 0), (6, 0)]}
    assert v.small_offset.tolist() == [0, 0, 0, 300, 300, 300, 300]
    assert v.small_bytes.tolist() == [0, 100, 110, 110, 100, 0, 50]
    assert v.small_max == 100
    # an allocation a pixel tall is drawn whatever the budget (250 bytes a pixel: C)
    v = lay.view(b, height=4, min_px=1 / 64, max_runs=0)
    assert bands(v) == {2: [(3, 0), (4, 0), (5, 0), (6, 0)]}
    assert (v.small_offset + v.small_bytes).tolist() == v.active.tolist()


def test_wide_columns_sample_their_peak(lay):
    v = lay.view(lay.event_bounds(0, 7, 3), height=100)
    assert v.bounds.tolist() == [0, 3, 5, 7]
    assert v.sample.tolist() == [2, 3, 6]  # argmax of active inside each column
    assert v.active.tolist() == [110, 410, 350]
    assert bands(v) == {0: [(0, 0), (1, 0)], 1: [(0, 100), (1, 100)], 2: [(1, 110), (2, 0)],
                        3: [(2, 300)]}  # fmt: skip


def test_time_axis_and_empty_columns_carry_the_state(lay):
    # events at t = 1000, 1010, ..., 1060; the first column [990, 1000) has no event
    b = lay.time_bounds(990, 1060, 7)
    assert b.tolist() == [0, 0, 1, 2, 3, 4, 5, 6]
    v = lay.view(b, height=100)
    assert v.sample.tolist() == [-1, 0, 1, 2, 3, 4, 5]
    assert v.active.tolist() == [0, 0, 100, 110, 410, 400, 300]
    assert v.reserved.tolist() == [0, 1000, 1000, 1000, 1000, 1000, 1000]
    # zoomed into one event: every column repeats it
    v = lay.view(lay.event_bounds(3, 4, 5), height=100)
    assert v.sample.tolist() == [3] * 5
    assert v.active.tolist() == [410] * 5


def test_offset_runs_encoding(lay):
    v = lay.view(lay.event_bounds(0, 7, 7), height=20)
    runs = v.offset_runs()
    assert runs == {"run_start": [0, 1, 3, 4], "run_col": [1, 3, 5, 6], "run_off": [0, 100, 0, 300]}


def test_range_argmax_matches_brute_force():
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 7, 32, 33, 64, 65, 1000, 4099):
        vals = rng.integers(0, 5, n)  # many ties: the leftmost maximum must win
        ra = RangeArgmax(vals)
        lo = rng.integers(0, n + 1, 200)
        hi = rng.integers(0, n + 1, 200)
        got = ra.query(lo, hi)
        for a, b, g in zip(lo, hi, got):
            assert g == (a + int(np.argmax(vals[a:b])) if b > a else -1)


@pytest.mark.parametrize("n", [0, 1, 2, 31, 32, 33, 63, 64, 65, 129, 4099])
def test_range_argmax_every_level_holds_each_blocks_leftmost_maximum(n):
    """Stored levels (blocks of 64 values and up) and the levels found per query alike:
    level k's block i is the first maximum of values[i * 2**k : (i + 1) * 2**k]; as many
    levels as halvings of n down to one, and level 0."""
    vals = np.random.default_rng(n).integers(0, 4, n)  # ties everywhere
    ra = RangeArgmax(vals)
    assert len(ra.levels) == 1 + max(n - 1, 0).bit_length()
    for k, level in enumerate(ra.levels):
        blocks = -(-n >> k)
        assert len(level) == blocks
        want = [i * 2**k + int(np.argmax(vals[i * 2**k : (i + 1) * 2**k])) for i in range(blocks)]
        assert list(level[np.arange(blocks)]) == want, k
    assert len(ra.stored) == max(len(ra.levels) - 6, 0)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    path = tmp_path_factory.mktemp("gen") / "g.pickle"
    generate_snapshot(path, events=20_000, truncate=500)
    return memlens.load(path, cache=False, warn=False).device(0)


def test_live_index_matches_live_at(generated):
    li = LiveIndex(generated)
    for e in [-1, 0, 1, 255, 256, 257, 5000, 12345, generated.n_events - 1]:
        assert li.live_at(e).tolist() == generated.live_at(e).tolist()


def test_random_viewports_match_a_brute_force_stack(generated):
    dev, lay = generated, DeviceLayout(generated)
    rng = np.random.default_rng(7)
    n = dev.n_events
    for i in range(25):
        e0 = float(rng.integers(0, n - 2)) if i % 5 else 0.0  # some start at 0
        e1 = float(min(n, e0 + rng.integers(2, n)))
        width, height = int(rng.integers(3, 80)), int(rng.choice([50, 400, 3000]))
        # every other viewport with sub-pixel detail, some under a tight cell budget
        min_px = 1.0 if i % 2 else float(rng.choice([1 / 16, 1 / 256]))
        max_runs = int(rng.choice([50, 500, MAX_DETAIL_RUNS]))
        v = lay.view(lay.event_bounds(e0, e1, width), height, min_px=min_px, max_runs=max_runs)
        got = bands(v)
        drawn = np.array(sorted(got), dtype=np.int64)
        sizes = dev.alloc_size.astype(np.int64)
        thin = drawn[sizes[drawn] < v.bytes_per_px]
        assert int(np.diff(v.run_start)[np.isin(v.band_rows, thin)].sum()) <= max_runs
        assert sizes[thin].min(initial=2**62) >= np.ceil(v.bytes_per_px * min_px)
        for c, s in enumerate(v.sample.tolist()):
            live = dev.live_at(s)
            # drawn: every allocation a pixel tall, and thin ones no smaller than any left out
            in_band = np.isin(live, drawn)
            assert (sizes[live] >= v.bytes_per_px)[~in_band].sum() == 0
            assert sizes[live[~in_band]].max(initial=0) <= v.small_max
            assert sizes[live[~in_band]].max(initial=0) <= sizes[thin].min(initial=2**62)
            big = live[in_band]
            expect, off = {}, 0
            for r in big.tolist():
                expect[r] = off
                off += int(dev.alloc_size[r])
            have = {r: o for r, cells in got.items() for cc, o in cells if cc == c}
            assert have == expect
            assert v.small_offset[c] == off
            assert v.small_offset[c] + v.small_bytes[c] == dev.active_at(s) == v.active[c]
            assert v.small_count[c] == len(live) - len(big)
            lo, hi = v.bounds[c], v.bounds[c + 1]
            if hi > lo:
                a_max, r_max = dev.active_after[lo:hi].max(), dev.reserved_after[lo:hi].max()
                if lo == 0:  # the first column includes the state before event 0
                    a_max = max(a_max, dev.baseline_bytes)
                    r_max = max(r_max, dev.reserved_start_bytes)
                assert v.active[c] == a_max
                assert v.reserved[c] == r_max
