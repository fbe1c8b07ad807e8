"""A stats sink that keeps what retention.metrics sends, for tests without a StatsD server."""

from __future__ import annotations

from typing import Any


class RecordingSink:
    """Keeps every value sent: (method, name, value, tags), in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any, dict[str, Any] | None]] = []

    def incr(self, stat: str, count: Any = None, rate: Any = None, *, tags: Any = None) -> None:
        self.sent.append(("incr", stat, count, tags))

    def gauge(
        self, stat: str, value: float, rate: Any = None, delta: Any = None, *, tags: Any = None
    ) -> None:
        self.sent.append(("gauge", stat, value, tags))

    def timing(self, stat: str, dt: Any, *, tags: Any = None) -> None:
        self.sent.append(("timing", stat, dt, tags))

    def values(self, name: str) -> list[Any]:
        """Every value sent under ``name`` (a per-policy name, or a tagged one)."""
        return [value for _, stat, value, _ in self.sent if stat == name]

    def last(self, name: str) -> Any:
        values = self.values(name)
        assert values, f"nothing sent as {name!r}; sent: {sorted({s for _, s, _, _ in self.sent})}"
        return values[-1]
