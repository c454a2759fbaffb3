"""Nothing in the package unpickles with the standard library's loaders: a pickle can name
any callable, so every pickle memlens reads goes through snapshot/read/safe_pickle.py (or
the compiled reader, which builds plain data only). Data memlens passes between its own
processes goes as JSON."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "memlens"
LOADERS = {"load", "loads", "Unpickler"}
# the only other reader, with why: a simulated job's ranks hand each other the objects their
# own script passes to torch.distributed's object collectives (broadcast_object_list, ...);
# its Unpickler subclass allows plain data, torch.Size, dtypes and its fake tensors only
# (find_class refuses every other global), from a folder made fresh and private (0700)
ALLOWED = {"simulation/distributed/objects.py": "rank-to-rank data of one simulated job"}


def plain_unpickling(path: Path) -> list[int]:
    """Lines that call pickle.load/loads or build pickle.Unpickler (or import them)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("pickle", "_pickle", "cPickle")
            and node.attr in LOADERS
        ):
            lines.append(node.lineno)
        if (
            isinstance(node, ast.ImportFrom)
            and node.module in ("pickle", "_pickle")
            and any(a.name in LOADERS for a in node.names)
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_module_unpickles_with_the_standard_loaders() -> None:
    found = {
        str(p.relative_to(SRC)): lines
        for p in sorted(SRC.rglob("*.py"))
        if (lines := plain_unpickling(p))
        # the safe unpickler subclasses pickle.Unpickler, with find_class refusing all
        and p.name != "safe_pickle.py"
        and str(p.relative_to(SRC)) not in ALLOWED
    }
    assert found == {}


def test_the_check_sees_a_plain_load(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle\nx = pickle.loads(b'')\nfrom pickle import load\n")
    assert plain_unpickling(bad) == [2, 3]
