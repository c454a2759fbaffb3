"""Bounded answers (memlens.agents.bound): exact cuts and notes on small hand-made JSON."""

from __future__ import annotations

import json

from memlens.agents.bound import Bounds, bound

ADVICE = (
    "ask for less (top, depth, event, a name or stage filter) to see the rest, or start the "
    "server with larger --max-items/--max-chars"
)


def test_small_answers_are_whole() -> None:
    result = {"a": [1, 2, 3], "b": {"c": "text", "children": []}}
    assert bound(result, Bounds(items=3)) == (result, [])


def test_lists_keep_their_first_entries_and_notes_fold_indices() -> None:
    result = {"by_site": [1, 2, 3, 4, 5], "stages": [{"grew": [1, 2, 3]}, {"grew": [1, 2, 3, 4]}]}
    out, notes = bound(result, Bounds(items=2))
    assert out == {"by_site": [1, 2], "stages": [{"grew": [1, 2]}, {"grew": [1, 2]}]}
    assert notes == [
        "by_site: 5 entries, first 2 kept",
        "stages[].grew: 4 entries, first 2 kept (in 2 places)",
        ADVICE,
    ]


def test_trees_stop_depth_levels_down() -> None:
    leaf = {"label": "c", "bytes": 1, "children": []}
    tree = {
        "label": "root",
        "children": [{"label": "a", "children": [{"label": "b", "children": [leaf]}]}],
    }
    out, notes = bound({"tree": tree}, Bounds(depth=2))
    # root's children are level 1, a's level 2; b keeps its bytes, not its children
    assert out == {
        "tree": {
            "label": "root",
            "children": [{"label": "a", "children": [{"label": "b", "children": []}]}],
        }
    }
    assert notes == ["tree.children[]: call-stack tree cut 2 levels down", ADVICE]


def test_long_text_is_cut() -> None:
    out, notes = bound({"site": "x" * 12}, Bounds(text=5))
    assert out == {"site": "xxxxx…"}
    assert notes == ["site: text of 12 characters cut to 5", ADVICE]


def test_too_many_characters_halves_the_lists_until_it_fits() -> None:
    rows = [{"n": i} for i in range(40)]  # {"n":0} is 7 characters, {"n":10} 8
    out, notes = bound({"rows": rows}, Bounds(items=40, chars=100))
    # {"rows":[ ... ]} is 11 characters, k rows k-1 commas: 40 rows (10 of 7, 30 of 8)
    # 11+70+240+39 = 360; 20 rows 11+70+80+19 = 180; 10 rows 11+70+9 = 90 fits
    assert len(json.dumps(out, separators=(",", ":"))) == 90
    assert out == {"rows": rows[:10]}
    assert notes == ["rows: 40 entries, first 10 kept", ADVICE]
