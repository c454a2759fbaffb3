"""A `json.py` in the folder memlens is started from does not run in the processes memlens
starts (issue 33): the fresh interpreters of `simulate --nproc-per-node` ranks and plan's
Dask points (execution/isolated.run_isolated) and plan's forkserver pool
(isolated_forkserver). Before, `python -m` and multiprocessing's `python -c` put that
folder first on sys.path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX start methods")

# the parent, started as the `memlens` console script is: its own folder first on sys.path
PARENT = """\
import sys
from memlens.execution.isolated import isolated_forkserver, run_isolated


def where(_: int) -> str:
    import json

    return json.__file__


if __name__ == "__main__":
    if sys.argv[1] == "isolated":
        done = run_isolated("probe", None)
        print(done.answer if done.error is None else done.error)
    else:
        with isolated_forkserver(["json"]).Pool(1) as pool:
            print(pool.apply(where, (0,)))
"""
PROBE = """\
from memlens.execution.isolated import serve

if __name__ == "__main__":
    serve(lambda _: __import__("json").__file__)
"""


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """(the working folder, with a json.py that leaves a marker; the marker)."""
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "json-ran"
    (work / "json.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "parent.py").write_text(PARENT)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "probe.py").write_text(PROBE)
    return work, marker


def _run(tmp_path: Path, work: Path, how: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path / "lib")])}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "bin" / "parent.py"), how],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    "how",
    [
        "isolated",  # run_isolated: simulate's ranks, plan's Dask points
        pytest.param(
            "forkserver",  # plan's local pool
            marks=pytest.mark.skipif(
                sys.version_info < (3, 11), reason="PYTHONSAFEPATH is Python 3.11's"
            ),
        ),
    ],
)
def test_no_module_is_imported_from_the_working_folder(
    tmp_path: Path, planted: tuple[Path, Path], how: str
) -> None:
    work, marker = planted
    found = _run(tmp_path, work, how)
    assert not marker.exists()
    assert Path(found).parent != work and Path(found).name == "__init__.py"  # the standard one


def test_the_environment_is_the_users_again_in_the_forked_processes(tmp_path: Path) -> None:
    """PYTHONSAFEPATH, PYTHONNOUSERSITE and memlens's folder on PYTHONPATH start the server
    only: a simulated script, and what it starts, sees the environment it was given."""
    script = tmp_path / "env.py"
    script.write_text(
        "import os\n"
        "from memlens.execution.isolated import isolated_forkserver\n"
        "def env(_):\n"
        "    return [os.environ.get(k) for k in ('PYTHONSAFEPATH', 'PYTHONNOUSERSITE', "
        "'PYTHONPATH', 'MEMLENS_FORKSERVER_RESTORE')]\n"
        "if __name__ == '__main__':\n"
        "    with isolated_forkserver([]).Pool(1) as pool:\n"
        "        print(pool.apply(env, (0,)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONNOUSERSITE")}
    env["PYTHONPATH"] = str(SRC)
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([None, None, str(SRC), None])
