"""Build the optional compiled snapshot reader, memlens.snapshot._fastreader, and the
one-pass replay, memlens.snapshot._fastreplay.

Everything else about the package is in pyproject.toml. The extension is optional: when
there is no C compiler or no zlib header, setuptools warns and the install goes on, and
memlens reads snapshots with its Python path (several times slower on large files; it
says so on stderr when it opens one) and replays them with numpy. See
src/memlens/snapshot/compiled.py and replay.py.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "memlens.snapshot._fastreader",
            sources=["src/memlens/snapshot/_fastreader.c"],
            libraries=["z"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "memlens.snapshot._fastreplay",
            sources=["src/memlens/snapshot/_fastreplay.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
