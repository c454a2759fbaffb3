"""CI must test the compiled reader, replay and checksum, not only the fallbacks: scripts/setup.sh
installs a C compiler's needs (zlib1g-dev) and `pip install -e .` builds the extensions, so
on CI a missing extension is a broken build, not a machine without a compiler. Elsewhere the
Python path is a supported configuration and this test skips."""

from __future__ import annotations

import os

import pytest

from memlens.snapshot.native import built, built_replay


def test_the_compiled_reader_is_built_on_ci() -> None:
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip("only enforced on CI (CI=true)")
    module = built()
    assert module is not None, "memlens.snapshot._fastreader was not built (see setup.py)"
    assert hasattr(module, "read")


def test_the_compiled_replay_is_built_on_ci() -> None:
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip("only enforced on CI (CI=true)")
    module = built_replay()
    assert module is not None, "memlens.snapshot._fastreplay was not built (see setup.py)"
    assert hasattr(module, "replay")


def test_the_compiled_checksum_is_built_on_ci() -> None:
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip("only enforced on CI (CI=true)")
    from memlens.snapshot.store import cache

    assert cache._checksum is not None, "memlens.snapshot.store._checksum was not built"
