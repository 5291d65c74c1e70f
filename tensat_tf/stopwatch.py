"""Wall-clock time by stage, for the JSON report's `timing_s` (convert's stages and the tensat pass's own)."""
from __future__ import annotations

import time


class Stopwatch:
    """`lap(stage)` adds the time since the previous lap (or the start) to `stage`; a stage seen twice accumulates
    (convert verifies twice when it falls back to the original graph)."""

    def __init__(self):
        self.start = self._last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.add(stage, now - self._last)
        self._last = now

    def add(self, stage: str, seconds: float) -> None:
        """Time measured elsewhere (a pass's own seconds) counted under `stage`."""
        self.seconds[stage] = round(self.seconds.get(stage, 0.0) + seconds, 4)

    def skip(self) -> None:
        """Start the next lap now: what ran since the last lap is not counted."""
        self._last = time.perf_counter()

    def total(self) -> float:
        return round(time.perf_counter() - self.start, 4)
