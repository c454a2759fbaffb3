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


# The C sources: the reader in units with one private header (reader.h), the replay in one
# file; owned_buffer.h and contract.h (generated: scripts/gen_c_contract.py) shared by both.
CSRC = Path("src/memlens/snapshot/csrc")
# the reader's units call each other: none of it is the extension's interface
HIDDEN = [] if sys.platform == "win32" else ["-fvisibility=hidden"]

setup(
    cmdclass={"build_py": BuildPy},
    ext_modules=[
        Extension(
            "memlens.snapshot._fastreader",
            sources=sorted(str(p) for p in CSRC.glob("reader_*.c")),
            depends=[str(p) for p in CSRC.glob("*.h")],
            include_dirs=[str(CSRC)],
            extra_compile_args=["-O2", *HIDDEN],
            optional=True,
        ),
        Extension(
            "memlens.snapshot._fastreplay",
            sources=[str(CSRC / "replay.c")],
            depends=[str(CSRC / "owned_buffer.h"), str(CSRC / "contract.h")],
            include_dirs=[str(CSRC)],
            extra_compile_args=["-O2", *HIDDEN],
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
