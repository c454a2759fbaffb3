"""Every hostile case through `memlens summary`, `peak`, `report` and the viewer's API, each
in its own process with 20 s and 2 GB: exit 0 or 2, no traceback, no negative or overflowed
figure, no raw control character (issue 16, "How we will know").

The default run takes a bounded selection (every bomb, every hostile-text file through
every command, each mutated field with two of the bad values); MEMLENS_HOSTILE_FULL=1
runs every case through every command (about 2,000 runs, several minutes on 2 cores).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from corpus import BAD_VALUES, FIELDS, SLOW_PREFIXES, bombs, hostile_text, mutations
from run_corpus import COMMANDS, TIME_LIMIT_S, run, warm_up

FULL = os.environ.get("MEMLENS_HOSTILE_FULL") == "1"
# a byte count printed negative (-8192.00 PiB) or absurdly large (past 8 PiB: no device)
NEGATIVE = re.compile(r"(?<![\w.+-])-\d[\d,.]*\s*(?:B|KiB|MiB|GiB|TiB|PiB|EiB)\b")
ABSURD = re.compile(r"\b\d[\d,.]*\s*(?:EiB|ZiB|YiB)\b|\b(?:[1-9]\d{3,}|[1-9]\d\d)[\d,.]*\s*PiB\b")


def _selected() -> list[tuple[str, bytes, tuple[str, ...]]]:
    cases: list[tuple[str, bytes, tuple[str, ...]]] = []
    for name, data in bombs():
        slow = name.startswith(SLOW_PREFIXES)
        if FULL or not slow:
            cases.append((name, data, COMMANDS if FULL else ("summary", "view-api")))
    labels = list(BAD_VALUES)
    fields = list(FIELDS)
    for name, data in mutations():
        m = re.match(r"type-(.+)=(.+)\.pickle", name)
        if m and not FULL:
            k = fields.index(m.group(1))
            if labels.index(m.group(2)) % 6 != k % 6:  # 2 of the 12 values per field
                continue
        cases.append((name, data, COMMANDS if FULL else ("summary",)))
    for name, data in hostile_text():
        cases.append((name, data, COMMANDS))
    return cases


CASES = _selected()


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile")
    for name, data, _ in CASES:
        (out / name).write_bytes(data)
    warm_up()
    return out


def check(result: dict[str, Any]) -> list[str]:
    """What is wrong with one run (empty: it held the line)."""
    problems = []
    out, err = result["stdout"], result["stderr"]
    if result["exit"] not in (0, 2):
        problems.append(f"exit {result['exit']}")
    if "Traceback" in out or "Traceback" in err:
        problems.append("traceback")
    if result["seconds"] > TIME_LIMIT_S:
        problems.append(f"{result['seconds']} s")
    if result["exit"] == 2:
        lines = [x for x in err.strip().splitlines() if not x.startswith("memlens: warning: ")]
        if len(lines) != 1 or not lines[0].startswith("memlens: error: "):
            problems.append("error is not one line")
    if NEGATIVE.search(out) or ABSURD.search(out):
        problems.append("negative or overflowed figure")
    if result["command"] in ("summary", "peak") and re.search(r"[\x00-\x08\x0b-\x1f\x7f]", out):
        problems.append("raw control character on the terminal")
    return problems


@pytest.mark.parametrize(
    "name,commands", [(n, c) for n, _, c in CASES], ids=[n for n, _, _ in CASES]
)
def test_hostile_case_holds_the_line(corpus_dir, name, commands):
    failures = {}
    for command in commands:
        result = run(str(corpus_dir / name), command)
        problems = check(result)
        if problems:
            failures[command] = (problems, result["stderr"][-600:] or result["stdout"][-600:])
    assert not failures, failures
