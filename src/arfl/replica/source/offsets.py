"""Source offsets: which batch a position closes, and where it is in every partition.

Spark writes whatever ``latestOffset()`` returns to the query's offset log as JSON and compares
offsets by that JSON, so the encoding here is canonical: partitions in ascending order, keys as
strings (JSON has no integer keys)::

    {"batch": 17, "offsets": {"0": 1200, "1": 1187}}

``batch`` is mode-specific and is what lets a restarted driver continue the *same* sequence of
batches: the epoch index of the cut (active-leaderless), the decision number ``k``
(active-leader) or a plain counter. ``-1`` marks a start position that closes no batch (the
topic's beginning or a user-given start).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NO_BATCH = -1
"""``batch`` of a start position that is not the end of any batch."""


@dataclass(frozen=True, slots=True)
class BatchOffset:
    """A position in every partition of the input topic, and the batch that ends there.

    Attributes:
        batch: the batch (epoch, decision) this position closes; :data:`NO_BATCH` for a start.
        offsets: partition -> the next offset to read (exclusive end of what came before).
    """

    batch: int
    offsets: Mapping[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The canonical dict Spark serialises into its offset log."""
        return {
            "batch": self.batch,
            "offsets": {str(p): int(self.offsets[p]) for p in sorted(self.offsets)},
        }

    def to_json(self) -> str:
        """Canonical JSON of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchOffset:
        """Parse what :meth:`to_dict` produced (as handed back by Spark).

        Raises:
            ValueError: the dict is not a source offset of this format.
        """
        try:
            batch = int(data["batch"])
            raw = data["offsets"]
            if not isinstance(raw, Mapping):
                raise TypeError("offsets is not an object")
            offsets = {int(p): int(o) for p, o in raw.items()}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"not an arfl source offset ({e}): {json.dumps(data)[:200]}; was the checkpoint "
                "written by another source? Use a fresh checkpoint directory"
            ) from None
        return cls(batch=batch, offsets=offsets)

    @classmethod
    def from_json(cls, text: str) -> BatchOffset:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: not JSON, or not a source offset.
        """
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"not an arfl source offset: {text[:200]}")
        return cls.from_dict(data)

    def same_position(self, other: BatchOffset) -> bool:
        """True when both name the same offset in every partition (whatever their batch)."""
        return dict(self.offsets) == dict(other.offsets)

    def records_until(self, end: BatchOffset) -> int:
        """Number of log positions between this start and ``end`` (markers included)."""
        return sum(max(0, end.offsets.get(p, o) - o) for p, o in self.offsets.items())


def parse_partition_offsets(text: str) -> dict[int, int]:
    """Parse a user-given start ``{"0": 12, "1": 0}`` (partition -> offset).

    Raises:
        ValueError: not a JSON object of integers.
    """
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        return {int(p): int(o) for p, o in data.items()}
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"bad start offsets {text[:200]!r} ({e}): expected a JSON object like "
            '{"0": 12, "1": 0} (partition -> offset)'
        ) from None
