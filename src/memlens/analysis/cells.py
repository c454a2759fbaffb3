"""Notebook cells named as cells: `<module> (cell In [3], line 6)` rather than
`<module> (/tmp/ipykernel_4679/843182234.py:6)`.

ipykernel compiles each cell into a file named by a hash of its code
(`<tmp>/ipykernel_<pid>/<hash>.py`), and older IPython into `<ipython-input-N-hash>`.
Inside a running IPython the kernel's compiler keeps the map from such a name to the
cell's execution count (`shell.compile._filename_map`, what IPython's own tracebacks read
to print `Cell In[3], line 6`); it is read here when IPython is already imported, so the
CLI never imports it. A cell file without a known number is still called a cell, by its
hash. Pure lookups, cached per filename by the callers (labels are memoized per snapshot).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping

_KERNEL_FILE = re.compile(r"[/\\]ipykernel_\d+[/\\](\d+)\.py$")
_IPYTHON_INPUT = re.compile(r"^<ipython-input-(\d+)-[0-9a-f]+>$")


def kernel_cells() -> Mapping[str, int]:
    """The running IPython's map from a cell's file name to its execution count ({} when
    there is no IPython shell in this process)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    found = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return found if isinstance(found, Mapping) else {}


def cell_name(filename: str, cells: Mapping[str, int] | None = None) -> str | None:
    """`cell In [3]` for a notebook cell's file (`cells`: file -> execution count, default
    the running kernel's), `notebook cell 843182234` when its number is unknown, None for
    any other file."""
    old = _IPYTHON_INPUT.match(filename)
    if old:
        return f"cell In [{int(old.group(1))}]"
    kernel = _KERNEL_FILE.search(filename)
    if kernel is None:
        return None
    number = (kernel_cells() if cells is None else cells).get(filename)
    return f"cell In [{number}]" if isinstance(number, int) else f"notebook cell {kernel.group(1)}"
