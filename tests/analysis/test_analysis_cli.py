"""Every analysis command, as text and as --json, on a hand-built snapshot (and on a real
one); the JSON keys are the documented schema (docs/json-schema.md)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
from analysis_snapshots import BIG_SIZE, oom_snapshot, training_snapshot

from memlens.cli.main import main


@pytest.fixture(scope="module")
def snap_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    p = d / "train.pickle"
    p.write_bytes(pickle.dumps(training_snapshot(), protocol=4))
    b = d / "train2.pickle"
    b.write_bytes(pickle.dumps(training_snapshot(2_000_000), protocol=4))
    r = d / "rules.json"
    r.write_text(json.dumps({"model": r"model\.py"}))
    return str(p), str(b), str(r)


def run(capsys, args: list[str]) -> tuple[int, str, str]:
    code = 0
    try:
        main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


# command args (after the snapshot) -> keys its --json must have
CASES = {
    "peak": (
        [],
        {"device", "event", "active_bytes", "by_site", "tree", "largest", "peak_active_bytes"},
    ),
    "at": (
        ["--addr", "0x100400_1", "--when", "free"],
        {"event", "active_bytes", "allocation", "when"},
    ),
    "stages": ([], {"device", "stages", "repeated", "notes", "has_time"}),
    "categories": ([], {"categories", "curve", "compile_contexts", "event"}),
    "leaks": ([], {"device", "groups", "notes"}),
    "anomalies": ([], {"late_frees", "large_temporaries", "reserved_gaps", "thresholds"}),
    "fragmentation": ([], {"curve", "max_gap_bytes", "at_peak", "end"}),
    "oom": ([], {"source", "devices"}),
    "ranks": ([], {"ranks", "imbalance", "sites"}),
}


@pytest.mark.parametrize("cmd", sorted(CASES))
def test_command_text_and_json(snap_file, capsys, cmd):
    path = snap_file[0]
    extra, keys = CASES[cmd]
    code, out, err = run(capsys, [cmd, path, *extra])
    assert code == 0, err
    assert out.strip()
    code, out, err = run(capsys, [cmd, path, *extra, "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert keys <= set(data)


def test_peak_and_at_values(snap_file, capsys):
    path = snap_file[0]
    data = json.loads(run(capsys, ["peak", path, "--json"])[1])
    assert data["active_bytes"] == 1610 + BIG_SIZE and data["event"] == 11
    data = json.loads(run(capsys, ["peak", path, "--event", "-1", "--json"])[1])
    assert data["active_bytes"] == 1000
    data = json.loads(run(capsys, ["at", path, "--time-us", "1125", "--json"])[1])
    assert data["event"] == 11
    assert (
        json.loads(run(capsys, ["at", path, "--addr", "0x100400", "--version", "1", "--json"])[1])[
            "event"
        ]
        == 9
    )
    code, _, err = run(capsys, ["at", path, "--addr", "0x100400"])
    assert code == 2 and "pass a version" in err
    code, _, err = run(capsys, ["at", path])
    assert code == 2 and "exactly one" in err


def test_rules_diff_fragmentation_event(snap_file, capsys):
    path, path2, rules = snap_file
    data = json.loads(run(capsys, ["rules", path, rules, "--json"])[1])
    assert {r["name"]: r["bytes"] for r in data["rules"]}["model"] == BIG_SIZE + 110
    code, out, _ = run(capsys, ["rules", path, rules])
    # the table, then each rule's top sites at the peak
    assert code == 0 and "\nmodel:\n" in out
    assert "1.43 MiB        3x  forward (/home/u/model.py:20)" in out
    code, out, _ = run(capsys, ["categories", path])
    assert "by compile context: not recorded" in out
    data = json.loads(run(capsys, ["diff", path, path2, "--json"])[1])
    assert data["figures"][0]["change"] == 500_000 and data["stages"]
    code, out, _ = run(capsys, ["diff", path, path2])
    assert code == 0 and "only in" not in out and "+488.28 KiB" in out
    # stage by stage: step 2 holds the bigger temporary (+500,000 B at its peak), and it
    # is freed inside, so its net does not change
    (step2,) = [ln for ln in out.splitlines() if ln.strip().startswith("ProfilerStep#2")]
    assert step2.split()[1:] == ["1.43", "MiB", "1.91", "MiB", "+488.28", "KiB",
                                 "+10", "B", "+10", "B", "0", "B"]  # fmt: skip
    data = json.loads(run(capsys, ["fragmentation", path, "--event", "11", "--json"])[1])
    assert data["n_segments"] == 2 and len(data["segments"]) == 2
    code, out, _ = run(capsys, ["categories", path, "--override", "mine=model\\.py"])
    assert code == 0 and "mine" in out
    code, _, err = run(capsys, ["categories", path, "--override", "nonsense"])
    assert code == 2


def test_sql_cli(snap_file, capsys):
    path = snap_file[0]
    code, out, _ = run(capsys, ["sql", path, "select count(*) as n from events"])
    assert code == 0 and "22" in out
    code, out, _ = run(capsys, ["sql", path, "--tables"])
    assert code == 0 and "allocations" in out
    code, _, err = run(capsys, ["sql", path, "select nope"])
    assert code == 2 and "SQL" in err


def test_real_cli_commands(shared_snapshots_dir, expected_figures, capsys, tmp_path):
    name = "cs336_memory_ctx128_fullstep.pickle"
    p, exp = str(shared_snapshots_dir / name), expected_figures[name]
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"optimizer": "optimizers\\.py", "backward": "Backward"}))
    got = {}
    for cmd, extra in (("peak", []), ("stages", []), ("categories", []), ("rules", [str(rules)]),
                       ("leaks", []), ("anomalies", []), ("fragmentation", []), ("oom", []),
                       ("ranks", []), ("at", ["--event", str(exp["peak_event_index"])])):  # fmt: skip
        code, text, err = run(capsys, [cmd, p, *extra])
        assert code == 0 and text.strip() and not err, (cmd, err)
        code, out, err = run(capsys, [cmd, p, *extra, "--json"])
        assert code == 0, (cmd, err)
        got[cmd] = json.loads(out)
    peak = exp["peak_active_bytes"]
    assert got["peak"]["active_bytes"] == got["at"]["active_bytes"] == peak
    assert sum(c["bytes"] for c in got["categories"]["categories"]) == peak
    assert sum(r["bytes"] for r in got["rules"]["rules"]) == peak
    assert max(s["peak_bytes"] for s in got["stages"]["stages"]) == peak
    assert got["ranks"]["ranks"][0]["peak_active_bytes"] == peak
    assert got["fragmentation"]["at_peak"]["reserved_bytes"] == exp["peak_reserved_bytes"]
    assert got["oom"]["devices"][0]["ooms"] == [] and got["leaks"]["groups"] == []


@pytest.mark.parametrize("shape", ["bare_segments", "empty_trace"])
def test_commands_on_traceless_snapshots(tmp_path, capsys, shape):
    """A bare segment list (old format) or an empty trace: everything still answers."""
    from analysis_snapshots import training_segments

    data = training_segments() if shape == "bare_segments" else {
        "segments": training_segments(), "device_traces": [[]]}  # fmt: skip
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(data, protocol=4))
    for cmd in (*sorted(CASES), "sql"):
        extra = ["select count(*) from allocations"] if cmd == "sql" else []
        if cmd == "at":
            extra = ["--event", "-1"]
        code, out, err = run(capsys, [cmd, str(p), *extra, "--json"])
        assert code == 0, (cmd, err)
        json.loads(out)
    data = json.loads(run(capsys, ["peak", str(p), "--json"])[1])
    assert data["event"] == -1 and data["active_bytes"] == 1525 and data["live_count"] == 6


# The text of every analysis command, byte for byte. The files were written by the code
# before the rendering moved to memlens.views.text; MEMLENS_GOLDEN_UPDATE=1 rewrites them
# after a deliberate change of the text.
GOLDEN = Path(__file__).parent / "cli_golden"
GOLDEN_CASES = {
    "peak": ["peak", "{train}"],
    "peak_event": ["peak", "{train}", "--event", "3", "--top", "2"],
    "at_free": ["at", "{train}", "--addr", "0x100400_1", "--when", "free"],
    "at_event": ["at", "{train}", "--event", "5", "--depth", "2", "--all-frames"],
    "stages": ["stages", "{train}"],
    "categories": ["categories", "{train}"],
    "rules": ["rules", "{train}", "{rules}"],
    "leaks": ["leaks", "{train}"],
    "anomalies": ["anomalies", "{train}", "--temp-min", "1KiB", "--gap-min", "1KiB"],
    "fragmentation": ["fragmentation", "{train}"],
    "fragmentation_event": ["fragmentation", "{train}", "--event", "11"],
    "oom": ["oom", "{oom}"],
    "ranks": ["ranks", "{train}", "{train2}"],
    "diff": ["diff", "{train}", "{train2}"],
    "summary": ["summary", "{oom}"],
    "check": ["check", "{train}", "--max-peak", "1KiB", "--baseline", "{train2}"],
    "sql": [
        "sql",
        "{train}",
        "select action, count(*) as n, sum(size) from events group by 1 order by 1",
    ],
    "sql_csv": [
        "sql",
        "{train}",
        "select row, alloc_event, free_event, addr, size, ghost from allocations order by 1 limit 3",
        "--csv",
    ],
    "sql_truncated": ["sql", "{train}", "select name from annotations order by 1", "--top", "2"],
}


@pytest.fixture(scope="module")
def golden_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("golden")
    files = {"train": training_snapshot(), "train2": training_snapshot(2_000_000),
             "oom": oom_snapshot()}  # fmt: skip
    for name, raw in files.items():
        (d / f"{name}.pickle").write_bytes(pickle.dumps(raw, protocol=4))
    (d / "rules.json").write_text(json.dumps({"model": r"model\.py"}))
    return d


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_text_output_is_unchanged(golden_dir, capsys, monkeypatch, case):
    # relative paths: the text (ranks' labels, diff's header) does not depend on tmp's name
    monkeypatch.chdir(golden_dir)
    paths = {"train": "train.pickle", "train2": "train2.pickle", "oom": "oom.pickle",
             "rules": "rules.json"}  # fmt: skip
    code, out, err = run(capsys, [a.format(**paths) for a in GOLDEN_CASES[case]])
    got = f"exit {code}\n--- stdout\n{out}--- stderr\n{err}"
    path = GOLDEN / f"{case}.txt"
    if os.environ.get("MEMLENS_GOLDEN_UPDATE") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")
