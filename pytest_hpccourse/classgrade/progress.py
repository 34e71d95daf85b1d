"""Progress of a class run: a live bar on a terminal, one plain line per finished task elsewhere (CI logs)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """Counts tasks: graded this run, skipped (already graded), failed (timeout, crash, grader error) and in
    flight. `mode`: "bar" (redrawn in place), "lines" (one line per task), "off", or "auto" (bar on a TTY)."""

    WIDTH = 28

    def __init__(self, total: int, mode: str = "auto", stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode = mode
        self.total = total
        self.done = self.skipped = self.failed = self.in_flight = 0
        self.start = time.monotonic()
        self._last_draw = 0.0

    def eta(self) -> str:
        finished = self.done
        left = self.total - self.done - self.skipped
        if finished == 0 or left <= 0:
            return "-"
        return _clock((time.monotonic() - self.start) / finished * left)

    def line(self) -> str:
        seen = self.done + self.skipped
        filled = int(self.WIDTH * seen / self.total) if self.total else self.WIDTH
        bar = "#" * filled + "." * (self.WIDTH - filled)
        return (f"[{bar}] {seen}/{self.total} tasks  graded {self.done}  skipped {self.skipped}  "
                f"running {self.in_flight}  failed {self.failed}  elapsed {_clock(time.monotonic() - self.start)}"
                f"  ETA {self.eta()}")

    def _draw(self, force: bool = False) -> None:
        if self.mode != "bar" or (not force and time.monotonic() - self._last_draw < 0.2):
            return
        self._last_draw = time.monotonic()
        self.stream.write("\r\x1b[2K" + self.line())
        self.stream.flush()

    def started(self, n: int = 1) -> None:
        self.in_flight += n
        self._draw()

    def skip(self, n: int = 1) -> None:
        self.skipped += n
        self._draw()

    def finished(self, what: str, failed: bool = False, *, was_running: bool = True) -> None:
        """One task finished; `what`: its one-line description (student, module, score, node, seconds)."""
        self.done += 1
        self.failed += int(failed)
        if was_running:
            self.in_flight -= 1
        if self.mode == "lines":
            self.stream.write(f"[{self.done + self.skipped}/{self.total}] {what}\n")
            self.stream.flush()
        elif self.mode == "bar":
            self.stream.write("\r\x1b[2K" + (what + "\n" if failed else ""))
            self._draw(force=True)

    def note(self, text: str) -> None:
        if self.mode == "off":
            return
        self.stream.write(("\r\x1b[2K" if self.mode == "bar" else "") + text + "\n")
        self._draw(force=True)

    def close(self) -> None:
        if self.mode == "bar":
            self._draw(force=True)
            self.stream.write("\n")
        if self.mode != "off":
            self.stream.write(f"{self.done} task(s) graded, {self.skipped} already graded, {self.failed} failed, "
                              f"in {_clock(time.monotonic() - self.start)}\n")
        self.stream.flush()
