"""Custom rules: file formats, first match wins, memory per rule at the peak and over time."""

from __future__ import annotations

import json

import pytest
from analysis_snapshots import BIG_SIZE, training_snapshot

import memlens
from memlens.analysis.rules import Rule, load_rules, parse_rules, rules_analysis
from memlens.errors import MemlensError


@pytest.fixture(scope="module")
def dev():
    return memlens.load(training_snapshot()).device(0)


def test_formats(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"opt": "torch/optim", "model": r"model\.py"}))
    assert load_rules(str(p)) == [Rule("opt", "torch/optim"), Rule("model", r"model\.py")]
    y = tmp_path / "r.yaml"
    y.write_text("rules:\n  - name: opt\n    pattern: torch/optim\n    description: optimizer\n")
    assert load_rules(str(y)) == [Rule("opt", "torch/optim", "optimizer")]
    bad: object
    for bad in ({"x": "("}, [], {"rules": [{"name": "a"}]}, {"other": "x"}, {}):
        with pytest.raises(MemlensError):
            parse_rules(bad)
    with pytest.raises(MemlensError, match="cannot read"):
        load_rules(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(MemlensError, match="not valid JSON"):
        load_rules(str(tmp_path / "bad.json"))
    (tmp_path / "snapshot.pickle").write_bytes(b"\x80\x04\x95")  # rules and snapshot swapped
    with pytest.raises(MemlensError, match="not a text file"):
        load_rules(str(tmp_path / "snapshot.pickle"))


def test_memory_per_rule(dev):
    rules = parse_rules({"optim": "torch/optim", "model": r"model\.py", "backward": "Backward"})
    r = rules_analysis(dev, rules)
    got = {
        x["name"]: (x["bytes"], x["count"], x["peak_bytes"], x["allocated_bytes"])
        for x in r["rules"]
    }
    assert got == {
        "optim": (300, 1, 300, 300),
        "model": (100 + BIG_SIZE + 10, 3, 100 + BIG_SIZE + 10, 100 + 50 + 10 + 100 + BIG_SIZE + 10),
        "backward": (200, 1, 230, 200 + 30),
        "other": (1000, 1, 1005, 5),  # the ghost (no stack) and X (train.py only)
    }
    assert [x["name"] for x in r["rules"]][-1] == "other"
    # top sites per rule at the peak (event 11): first user frame, torch's own hidden
    tops = {x["name"]: [(s["site"], s["bytes"], s["count"]) for s in x["top_sites"]]
            for x in r["rules"]}  # fmt: skip
    assert tops == {
        "optim": [("train (/home/u/train.py:50)", 300, 1)],
        "model": [("forward (/home/u/model.py:20)", 100 + BIG_SIZE + 10, 3)],
        "backward": [("torch::autograd::generated::MmBackward0::apply", 200, 1)],
        "other": [("<no stack recorded>", 1000, 1)],
    }
    assert all(x["top_sites"] == [] for x in rules_analysis(dev, rules, top=0)["rules"])
    totals = [sum(r["curve"]["bytes"][k][i] for k in r["curve"]["bytes"]) for i in range(22)]
    assert totals == dev.active_after.tolist()


def test_first_match_wins(dev):
    # every forward stack also holds train.py: the first rule takes them all
    rules = parse_rules({"train": r"train\.py", "model": r"model\.py"})
    got = {x["name"]: x["bytes"] for x in rules_analysis(dev, rules)["rules"]}
    assert got == {"train": 300 + 100 + BIG_SIZE + 10, "model": 0, "other": 1200}
    # and at another event
    r = rules_analysis(dev, rules, event=-1)
    assert {x["name"]: x["bytes"] for x in r["rules"]}["other"] == 1000


def test_real_rules_add_up(shared_snapshots_dir, expected_figures):
    rules = parse_rules({"optimizer": r"optim", "user": r"/home/", "autograd": "autograd"})
    for name, exp in expected_figures.items():
        dev = memlens.load(shared_snapshots_dir / name).device(exp["device"])
        r = rules_analysis(dev, rules, points=20)
        assert sum(x["bytes"] for x in r["rules"]) == exp["peak_active_bytes"]
