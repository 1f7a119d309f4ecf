"""The one home of interning: distinct values numbered in first-seen order.

Profiles repeat the same strings, stacks and source sites millions of times; readers, attribution
and the report keep each distinct value once and refer to it by its code (an index into
``values``), as HTA's symbol table does for its analyzers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

import numpy as np
import pandas as pd

T = TypeVar("T", bound=Hashable)


class Interner(Generic[T]):
    """``code(v)`` is ``v``'s index in ``values``, assigned the first time ``v`` is seen.

    ``normalize`` maps a raw value to the value kept (``str`` for a reader's mixed ids), so two raw
    spellings of one value share a code; ``fixed`` pre-assigns codes outside ``values`` (a reader's
    ``None`` -> its 'no string' code)."""

    __slots__ = ("values", "_index", "_normalize", "_dtype")

    def __init__(self, *, normalize: Callable[[object], T] | None = None, fixed: dict[object, int] | None = None,
                 dtype: type = np.int64) -> None:
        self.values: list[T] = []
        self._index: dict[object, int] = dict(fixed or {})
        self._normalize = normalize
        self._dtype = dtype  # of the arrays ``codes`` returns

    def __len__(self) -> int:
        return len(self.values)

    def get(self, value: object) -> int | None:
        return self._index.get(value)

    def code(self, value: object) -> int:
        i = self._index.get(value)
        if i is None:
            kept = self._normalize(value) if self._normalize is not None else value
            i = self._index.get(kept)
            if i is None:
                i = len(self.values)
                self.values.append(kept)  # type: ignore[arg-type]
                self._index[kept] = i
            self._index[value] = i
        return i

    def codes(self, values: Iterable[object]) -> np.ndarray:
        """The codes of many values at C speed: ``map(dict.get)`` first; only a batch with new
        values takes a second pass, a Python loop over its distinct values; codes follow first
        appearance, so the same input always gives the same codes."""
        values = values if isinstance(values, list) else list(values)
        get = self._index.get
        out = list(map(get, values))
        if None in out:
            index = self._index
            for v in dict.fromkeys(values):  # distinct values in first-seen order, built in C
                if v not in index:
                    self.code(v)
            out = list(map(get, values))
        return np.array(out, dtype=self._dtype)


def per_distinct(values: object, fn: Callable[[object], object], dtype: type | str = object) -> np.ndarray:
    """``fn(v)`` for every element of ``values``, evaluated once per distinct value: profiles
    repeat a few thousand names (or codes) over millions of rows. A missing value (None or NaN)
    reaches ``fn`` once, as NaN (pandas' factorize makes them one value)."""
    arr = np.asarray(values)
    if not len(arr):
        return np.zeros(0, dtype=dtype)
    codes, uniques = pd.factorize(arr.ravel(), use_na_sentinel=False)
    table = np.array([fn(u) for u in uniques], dtype=dtype)
    return table[codes].reshape(arr.shape)
