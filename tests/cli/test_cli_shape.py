"""The command plumbing: exit codes from a real process, the one way two-snapshot commands
take their arguments, --device help that says what each command does by default."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from memlens.cli.main import cli, run

# a command that ends with ctx.exit(3), run through memlens's own entry point
EXIT_3 = """
import importlib.machinery, sys, types
import click
from memlens.cli import main as m

@click.command("three")
@click.pass_context
def command(ctx):
    ctx.exit(3)

module = types.ModuleType("memlens.cli.three")
module.__spec__ = importlib.machinery.ModuleSpec("memlens.cli.three", None)
module.command = command
sys.modules["memlens.cli.three"] = module
m.COMMANDS["three"] = "three"
m.main(["three"])
"""


def test_ctx_exit_code_reaches_the_process():
    """d4: click returns (not raises) ctx.exit's code in standalone_mode=False; main()
    dropped it, so ctx.exit(3) exited 0."""
    proc = subprocess.run([sys.executable, "-c", EXIT_3], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr


def test_check_exit_codes_from_a_real_process(hand_file):
    def memlens(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "memlens", *args]
        return subprocess.run(cmd, capture_output=True, text=True)

    over = memlens("check", str(hand_file), "--max-peak", "1KiB")
    assert over.returncode == 1
    assert over.stdout == ""
    assert over.stderr.endswith("memlens check: budget exceeded\n")
    within = memlens("check", str(hand_file), "--max-peak", "1MiB", "--json")
    assert within.returncode == 0 and '"ok": true' in within.stdout
    assert memlens("check", str(hand_file)).returncode == 2


def test_run_returns_the_code(hand_file, capsys):
    assert run(["summary", str(hand_file)]) == 0
    assert run(["check", str(hand_file), "--max-peak", "1KiB"]) == 1
    assert run(["summary", str(hand_file / "nope")]) == 2
    assert run(["summary", "--no-such-option"]) == 2
    capsys.readouterr()


@pytest.mark.parametrize("command", ["view", "tui", "report", "diff"])
def test_two_snapshot_commands_take_them_the_same_way(command, tmp_path, capsys):
    usage = CliRunner().invoke(cli, [command, "--help"]).output.splitlines()[0]
    shape = "SNAPSHOT SNAPSHOT2" if command == "diff" else "SNAPSHOT [SNAPSHOT2]"
    assert usage == f"Usage: cli {command} [OPTIONS] {shape}"
    # a third snapshot is a one-line error, exit 2
    assert run([command, "a", "b", "c"]) == 2
    wanted = "two snapshots, A and B" if command == "diff" else "one snapshot, or two to compare"
    assert capsys.readouterr().err == f"memlens: error: {command} takes {wanted}\n"


def test_diff_needs_two(hand_file, capsys):
    assert run(["diff", str(hand_file)]) == 2
    assert "diff takes two snapshots" in capsys.readouterr().err


def test_device_help_says_the_default():
    """--device said "default: every device" where most commands take the longest trace."""
    every = {"summary", "oom", "check", "ranks", "export"}
    ctx = cli.make_context("memlens", ["--help"], resilient_parsing=True)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        found = [p for p in command.params if p.name == "device"]
        if not found:
            continue
        (device,) = found
        text = device.help or ""
        if name in every:
            assert "every device" in text or "all" in text, name
        else:
            assert "longest trace" in text, (name, text)
