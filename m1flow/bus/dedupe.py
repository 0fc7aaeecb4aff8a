"""Remember recently seen ids so a redelivered message is processed once."""
from __future__ import annotations

from collections import OrderedDict


class SeenIds:
    """A bounded LRU set: redeliveries arrive close to the original, so a window is enough."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def seen(self, message_id: str) -> bool:
        """Record the id; True if it had been seen before."""
        if not message_id:
            return False
        if message_id in self._ids:
            self._ids.move_to_end(message_id)
            return True
        self._ids[message_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return False

    def forget(self, message_id: str) -> None:
        """Unrecord an id whose message was not processed (dead-lettered), so a good copy still is."""
        self._ids.pop(message_id, None)

    def __contains__(self, message_id: str) -> bool:
        return message_id in self._ids
