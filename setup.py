"""Build the optional compiled snapshot reader, memlens.snapshot._fastreader, the
one-pass replay, memlens.snapshot._fastreplay, and the column cache's checksum,
memlens.snapshot.store._checksum.

Everything else about the package is in pyproject.toml, except one build step: the two
docs the MCP server offers as resources (memlens.agents.resources) are copied into the
package, so docs/ stays their one source. The extension is optional: when
there is no C compiler, setuptools warns and the install goes on, and
memlens reads snapshots with its Python path (several times slower on large files; it
says so on stderr when it opens one) and replays them with numpy. See
src/memlens/snapshot/read/compiled.py and replay/device.py.
"""

import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

AGENT_DOCS = ("json-schema.md", "concepts.md")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "memlens" / "agents" / "docs"
        target.mkdir(parents=True, exist_ok=True)
        for name in AGENT_DOCS:
            shutil.copyfile(Path(__file__).parent / "docs" / name, target / name)


PTHREAD = [] if sys.platform == "win32" else ["-pthread"]

setup(
    cmdclass={"build_py": BuildPy},
    ext_modules=[
        Extension(
            "memlens.snapshot._fastreader",
            sources=["src/memlens/snapshot/_fastreader.c"],
            # the scan runs in a thread beside the reader (pthreads; Windows: one after
            # the other)
            extra_compile_args=["-O2", *PTHREAD],
            extra_link_args=PTHREAD,
            optional=True,
        ),
        Extension(
            "memlens.snapshot._fastreplay",
            sources=["src/memlens/snapshot/_fastreplay.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        # CRC-32C for the column cache's check (Python's zlib.crc32 when not built)
        Extension(
            "memlens.snapshot.store._checksum",
            sources=["src/memlens/snapshot/store/_checksum.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ],
)
