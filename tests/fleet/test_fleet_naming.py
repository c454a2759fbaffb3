"""Which files are the ranks and which rank each one is."""

from __future__ import annotations

import pytest

from memlens.errors import MemlensError
from memlens.fleet.naming import expand_paths, natural_key, rank_ids


def test_rank_ids_from_the_file_names():
    assert rank_ids(["a/rank12.pickle", "a/rank3.pickle"]) == ([12, 3], "file name")
    assert rank_ids(["RANK_7.pkl", "rank-8.pkl"]) == ([7, 8], "file name")
    assert rank_ids(["snap_12.pickle", "snap_4.pickle.gz"]) == ([12, 4], "file name")


def test_rank_ids_fall_back_to_the_order_given():
    # one name without a number, or two files with one id: numbered in order
    assert rank_ids(["x.pickle", "rank1.pickle"]) == ([0, 1], "order")
    assert rank_ids(["a/rank1.pickle", "b/rank1.pickle"]) == ([0, 1], "order")


def test_rank_regex_overrides_and_must_name_every_file():
    ids = rank_ids(["job-w003-step9.pickle", "job-w010-step9.pickle"], r"w(\d+)")
    assert ids == ([3, 10], "--rank-regex")
    with pytest.raises(MemlensError, match="every file name"):
        rank_ids(["job-w003.pickle", "other.pickle"], r"w(\d+)")
    with pytest.raises(MemlensError, match="--rank-regex"):
        rank_ids(["a.pickle"], r"(")


def test_expand_directories_globs_and_missing_files(tmp_path):
    for name in ("rank10.pickle", "rank2.pickle", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    d = str(tmp_path)
    assert expand_paths([d]) == [f"{d}/rank2.pickle", f"{d}/rank10.pickle"]
    assert expand_paths([f"{d}/rank1*.pickle"]) == [f"{d}/rank10.pickle"]
    # each file once; a missing file is kept (it becomes a failed row)
    assert expand_paths([f"{d}/rank2.pickle", d, f"{d}/gone.pickle"]) == [
        f"{d}/rank2.pickle", f"{d}/rank10.pickle", f"{d}/gone.pickle"]  # fmt: skip
    with pytest.raises(MemlensError, match="no file matches"):
        expand_paths([f"{d}/*.json"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(MemlensError, match="no snapshot files"):
        expand_paths([f"{d}/empty"])


def test_natural_order():
    assert sorted(["r10", "r2", "r1"], key=natural_key) == ["r1", "r2", "r10"]
