"""`memlens diff A.pickle B.pickle`: what changed between two snapshots."""

from __future__ import annotations

import click

from memlens.cli.options import (
    emit_json,
    hide_option,
    hide_patterns,
    json_option,
    no_cache_option,
    open_snapshot,
)


@click.command("diff")
@click.argument("snapshot_a", type=click.Path(dir_okay=False))
@click.argument("snapshot_b", type=click.Path(dir_okay=False))
@click.option(
    "--device",
    "-d",
    type=int,
    default=None,
    help="Device of both (default: longest trace of each).",
)
@click.option(
    "--device-b", type=int, default=None, help="Device of B when it differs from --device."
)
@click.option("--top", type=int, default=20, show_default=True, help="How many call sites to list.")
@json_option
@no_cache_option
@hide_option
def command(snapshot_a: str, snapshot_b: str, device: int | None, device_b: int | None, top: int,
            as_json: bool, no_cache: bool, hide: tuple[str, ...]) -> None:  # fmt: skip
    """Peak, baseline and reserved change; per call site, bytes at each peak and the
    change; stage by stage when both have annotations. A is the base, B the new one."""
    from memlens.analysis.diff import diff
    from memlens.analysis.text import fmt_delta, table_lines
    from memlens.units import format_bytes as fb

    a = open_snapshot(snapshot_a, no_cache).device(device)
    b = open_snapshot(snapshot_b, no_cache).device(device_b if device_b is not None else device)
    result = diff(a, b, limit=top, hide_patterns=hide_patterns(hide))
    if as_json:
        emit_json(result)
        return

    def v(name: str, x: int) -> str:
        return f"{x:,}" if name == "trace_entries" else fb(x)

    def p(x: float | None) -> str:
        return "" if x is None else f"{x:+.2f}%"

    lines = [f"A = {snapshot_a} (device {a.device})", f"B = {snapshot_b} (device {b.device})", ""]
    lines += table_lines(["", "A", "B", "change", "%"],
                         [[f["name"], v(f["name"], f["a"]), v(f["name"], f["b"]),
                           (f"{f['change']:+,}" if f["name"] == "trace_entries" else fmt_delta(f["change"])),
                           p(f["change_pct"])] for f in result["figures"]])  # fmt: skip
    lines += ["", f"call sites at each peak ({result['sites_total']} sites, largest change first):"]
    lines += table_lines(["site", "A", "B", "change", ""],
                         [[s["site"], fb(s["a_bytes"]), fb(s["b_bytes"]), fmt_delta(s["change"]),
                           {"both": "", "only_a": "only in A", "only_b": "only in B"}[s["status"]]]
                          for s in result["sites"]])  # fmt: skip
    if result["stages"]:

        def b(x: int | None) -> str:
            return "" if x is None else fb(x)

        def d(x: int | None) -> str:
            return "" if x is None else fmt_delta(x)

        lines += ["", "stage by stage (peak inside, and net = end - start):"]
        lines += table_lines(["stage", "A peak", "B peak", "change", "A net", "B net", "change"],
                             [[s["name"] + (f" [{s['occurrence']}]" if s["occurrence"] else ""),
                               b(s["a_peak_bytes"]), b(s["b_peak_bytes"]), d(s["peak_change"]),
                               d(s["a_net_bytes"]), d(s["b_net_bytes"]), d(s["net_change"])]
                              for s in result["stages"]])  # fmt: skip
    click.echo("\n".join(lines))
