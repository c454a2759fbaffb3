"""`memlens.inspect` is the function whatever was imported first (review d5).

It used to be the package too: importing a submodule of `memlens.inspect` bound the package
to that name on `memlens`, and a `__class__` swap made the package callable. Each order is
checked in a fresh interpreter, since the import order is the point.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = (
    "import inspect, memlens; f = memlens.inspect; "
    "assert inspect.isfunction(f), type(f); "
    "assert f.__module__ == 'memlens.inspector.api', f.__module__; "
    "assert 'model' in inspect.signature(f).parameters; "
    "assert 'torch' not in sys.modules, 'torch imported'"
)


@pytest.mark.parametrize(
    "first",
    [
        "import memlens",
        "import memlens.inspector.store; import memlens",
        "import memlens.inspector; import memlens",
        "import memlens; import memlens.inspector.annotations",
    ],
)
def test_memlens_inspect_is_always_the_function(first):
    code = f"import sys; {first}; {CHECK}"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_package_exports_what_the_docs_name():
    import memlens.inspector as pkg
    from memlens.inspector.annotations import activation_annotations
    from memlens.inspector.store import load_run

    assert pkg.activation_annotations is activation_annotations
    assert pkg.load_run is load_run
    assert sorted(dir(pkg)) == sorted(pkg.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = pkg.nope
