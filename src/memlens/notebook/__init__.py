"""memlens in Jupyter (`pip install 'memlens[notebook]'`).

    snap = memlens.load("step.pickle")
    snap                                  # figures + timeline, static (Snapshot._repr_html_)
    memlens.notebook.view(snap)           # the interactive viewer in the cell (an iframe)

    %load_ext memlens
    %%memlens simulate --device-memory 24GiB      # run the cell on fake CUDA, show the result
    %%memlens record -o step.pickle               # record the cell on the GPU, show the result

Top layer, like memlens.recording: it joins the viewer's server (views/web), the
recorder (capture, via memlens.recording) and the simulator.
"""

from __future__ import annotations

from typing import Any

from memlens.notebook.viewer import Viewer, stop_all, view

__all__ = ["Viewer", "load_ipython_extension", "stop_all", "view"]


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext memlens` (or `%load_ext memlens.notebook`): registers `%%memlens`."""
    from memlens.notebook.magics import MemlensMagics

    ipython.register_magics(MemlensMagics)
