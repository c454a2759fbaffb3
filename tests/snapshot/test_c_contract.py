"""The C reader and replay share two tables with the Python, kept in one place: the entry
fields the reader types (entries.TYPED_ENTRY_FIELDS) and the alloc_flags bits (model.py).
The C side is generated from them (scripts/gen_c_contract.py -> csrc/contract.h); this
holds the committed header to the generator, and the built modules to the Python."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from memlens.snapshot import model
from memlens.snapshot.assemble.entries import KNOWN_ENTRY_FIELDS, TYPED_ENTRY_FIELDS
from memlens.snapshot.native import built, built_replay

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_c_contract", ROOT / "scripts/gen_c_contract.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_header_is_the_generated_one() -> None:
    gen = _generator()
    assert gen.HEADER.read_text(encoding="utf-8") == gen.render(), (
        "csrc/contract.h is stale: run python3 scripts/gen_c_contract.py"
    )
    assert "F_DEVICE_FREE, F_POOL_ID, NF" in gen.render()  # the enum the reader's rows index by


def test_typed_fields_are_known_fields() -> None:
    assert set(TYPED_ENTRY_FIELDS) <= KNOWN_ENTRY_FIELDS
    assert len(set(TYPED_ENTRY_FIELDS)) == len(TYPED_ENTRY_FIELDS) == 11


@pytest.mark.skipif(built() is None, reason="compiled reader not built")
def test_the_built_reader_types_the_pythons_fields() -> None:
    fast = built()
    assert fast is not None
    assert fast.TYPED_FIELDS == TYPED_ENTRY_FIELDS


@pytest.mark.skipif(built_replay() is None, reason="compiled replay not built")
def test_the_built_replay_sets_the_pythons_flag_bits() -> None:
    fast = built_replay()
    assert fast is not None
    names = ("PREEXISTING", "GHOST", "LIVE_AT_END", "PENDING_FREE", "OVERWRITTEN")
    assert {name: getattr(model, name) for name in names} == fast.ALLOC_FLAGS
    assert fast.ALLOC_FLAGS == {"PREEXISTING": 1, "GHOST": 2, "LIVE_AT_END": 4,
                                "PENDING_FREE": 8, "OVERWRITTEN": 16}  # fmt: skip
