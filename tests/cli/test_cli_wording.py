"""The first hour's wording: a "next:" hint after the headline commands (dimmed, never in
--json), a warning for a size without a unit, `leaks` in words."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from memlens.cli.main import cli
from memlens.views.text.next_step import next_step


def invoke(*args: str, color: bool = False) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, color=color)


@pytest.mark.parametrize(
    "command, expected",
    [
        ("summary", "next: memlens peak {p}   (what is live at the peak, by call stack)"),
        ("peak", "next: memlens advise {p}   (ranked fixes with the bytes at stake)"),
        ("leaks", "next: memlens stages {p}   (memory per stage, and the sites that grew or shrank)"),
    ],
)  # fmt: skip
def test_headline_commands_end_with_the_next_command(hand_file, command, expected):
    r = invoke(command, str(hand_file))
    assert r.exit_code == 0, r.output
    assert r.output.endswith("\n\n" + expected.format(p=hand_file) + "\n")
    as_json = invoke(command, str(hand_file), "--json")
    assert "next:" not in as_json.output
    json.loads(as_json.output)


def test_the_hint_is_dim_on_a_terminal_and_quotes_paths(hand_file, tmp_path):
    r = invoke("summary", str(hand_file), color=True)
    assert f"\x1b[2m\nnext: memlens peak {hand_file}" in r.output
    assert next_step("diff", ["a b.pickle", "c.pickle"]) == (
        "next: memlens view 'a b.pickle' c.pickle   (both timelines side by side)"
    )
    assert next_step("stages", "x.pickle") is None  # not a headline command


def test_a_size_without_a_unit_warns_that_it_means_bytes(hand_file):
    r = CliRunner().invoke(cli, ["check", str(hand_file), "--max-peak", "20"])
    assert r.exit_code == 1
    assert (
        "memlens: warning: --max-peak 20 has no unit, so it means 20 bytes; write 20B to say "
        "so, or e.g. 20GiB" in r.output
    )
    quiet = CliRunner().invoke(cli, ["check", str(hand_file), "--max-peak", "20B"])
    assert quiet.exit_code == 1 and "warning" not in quiet.output


def test_leaks_without_repeated_stages_says_so_in_words(hand_file):
    r = invoke("leaks", str(hand_file))
    assert r.output.splitlines()[0] == "device 0: no repeated stages to compare"
    assert "stage group(s)" not in r.output
