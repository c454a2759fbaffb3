"""Keyword arguments onto a frozen settings dataclass, for the entry points that take their
settings as keywords (`memlens.simulate`, `memlens.inspect`, the trainer callbacks): the
dataclass is the one place the names, defaults and checks are written."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")


def field_names(cls: type[DataclassInstance]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def with_options(cls: type[C], base: C | None, options: Mapping[str, Any], who: str) -> C:
    """`base` (or the defaults) with the keywords in `options` replacing its fields; an
    unknown keyword is the TypeError a function's signature would raise (`who` names it)."""
    unknown = sorted(set(options) - field_names(cls))
    if unknown:
        raise TypeError(f"{who} got unexpected keyword argument(s) {unknown}")
    return dataclasses.replace(base or cls(), **options)


def show_fields(fn: Callable[..., Any], cls: type[DataclassInstance], keep: int) -> None:
    """Make help() and inspect.signature() show `fn`'s first `keep` parameters then the
    fields of `cls` as its keywords, with their defaults, instead of `**options`."""
    head = list(inspect.signature(fn).parameters.values())[:keep]
    keywords = [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type
        )
        for f in dataclasses.fields(cls)
    ]
    fn.__signature__ = inspect.signature(fn).replace(parameters=[*head, *keywords])  # type: ignore[attr-defined]


def field_docs(cls: type[DataclassInstance]) -> dict[str, str]:
    """Each field's line in the class docstring, "- `name`: what it is" (to the next
    field's line or the end), as one line: the help of a command line made of the fields."""
    doc = inspect.getdoc(cls) or ""
    out: dict[str, str] = {}
    for names, text in re.findall(r"^- (`.+?`): (.*?)(?=^- `|\Z)", doc, flags=re.M | re.S):
        for name in re.findall(r"`(\w+)`", names):
            out[name] = " ".join(text.split())
    return out
