"""Latest-only slots: what a viewer has not been sent yet, one item per key at most. Pure.

A viewer whose socket is slow never makes the server buffer: a newer tile of a camera replaces the
unsent one (the caller counts it as dropped), so memory per viewer is bounded by its number of cameras.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LatestSlots(Generic[K, V]):
    """One pending item per key; keys are served in the order they first became pending."""

    def __init__(self) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()

    def put(self, key: K, item: V) -> bool:
        """Hold `item` for `key`; True when it replaced an item never sent (for the caller to count)."""
        replaced = key in self._items
        self._items[key] = item  # an existing key keeps its place in line: no camera starves
        return replaced

    def take(self) -> tuple[K, V] | None:
        """The oldest pending (key, item), removed; None when nothing is pending."""
        if not self._items:
            return None
        return self._items.popitem(last=False)

    def discard(self, keep: set[K]) -> None:
        """Forget pending items whose key is not in `keep` (cameras no longer on the page)."""
        for key in [k for k in self._items if k not in keep]:
            del self._items[key]

    def __len__(self) -> int:
        return len(self._items)
