"""The analyses: `registry` holds one declaration per question (see registry.py), and
`get(name)` / `run(name, *inputs, **options)` are its short forms:

    from memlens.analysis import run
    run("leaks", "step.pickle", top=5)   # what `memlens leaks step.pickle --top 5 --json` prints
"""

from __future__ import annotations

from memlens.analysis import registry
from memlens.analysis.registry import get, run

__all__ = ["get", "registry", "run"]
