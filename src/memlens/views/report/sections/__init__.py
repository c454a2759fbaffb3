"""The report's sections, one module per section, each with a SECTION (context.Section):
its id, title, the function that renders it and when it is shown. build.sections() puts
them in page order; common.py holds the tables several of them share.

A section calls its analysis (memlens.analysis.*) and renders the result, never computing
memory figures itself. It returns HTML (already safe) or None to be left out, and raises
SectionUnavailable when it has nothing to show; anything else it raises becomes a
one-line note and a problem (context.guarded)."""
