"""Advice: what to change, ranked by the bytes it would save, each with the change to paste
(memlens.analysis.advise with its allocator replays, as `memlens advise` prints it)."""

from __future__ import annotations

from memlens.analysis.advise import advise
from memlens.analysis.advise_replays import AdviseOptions, advise_replayed
from memlens.views.report.context import ReportContext, Section
from memlens.views.report.page import esc, fmt_bytes, note, num, table
from memlens.views.report.sections.common import sites_table

# The allocator replays run in Python, about 7 s per million events each, and the report
# must stay fast on huge traces: it replays traces up to this many events (memlens advise
# replays any).
REPLAY_EVENTS = 200_000


def advise_section(ctx: ReportContext) -> str:
    if ctx.dev.n_events <= REPLAY_EVENTS:
        result, _ = advise_replayed(ctx.dev, AdviseOptions(hide_patterns=ctx.hide_patterns))
    else:
        result = advise(ctx.dev, hide_patterns=ctx.hide_patterns)
        result["notes"].append(
            f"the trace has {ctx.dev.n_events:,} events: the allocator replays (the "
            "fragmentation finding, an OOM's allocator setting) are left out of the report; "
            "memlens advise SNAPSHOT gives them"
        )
    notes = "".join(note(n) for n in result["notes"])
    found = result["findings"]
    if not found:
        return notes + note("No finding: nothing to change that memlens can size.")
    rows = [
        [str(k), f["kind"], num(fmt_bytes(f["bytes"])), f["certainty"]]
        for k, f in enumerate(found, 1)
    ]
    parts = [table(["#", "finding", "bytes at stake", "how sure"], rows, numeric=(2,)), notes]
    for k, f in enumerate(found, 1):
        parts.append(
            f"<h3>{k}. {esc(f['kind'])}: {fmt_bytes(f['bytes'])} ({esc(f['certainty'])})</h3>"
            f"<p>{esc(f['summary'])}</p>"
            f'<p class="covers">covers: {esc(f["covers"])}</p>'
            f'<p>The change to make:</p><pre class="change"><code>{esc(f["change"])}</code></pre>'
        )
        if f["sites"]:
            parts.append(sites_table(f["sites"]))
    return "".join(parts)


SECTION = Section("advise", "Advice: what to change", advise_section)
