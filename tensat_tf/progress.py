"""Progress on long work that a log file does not drown in.

On a terminal (stderr is a TTY) one status line is redrawn in place (`\\r`), at most `min_interval` apart, with the
seconds spent in the current stage ticking, so a long saturation or ILP shows it is alive; it is erased before
anything else is printed and when the work ends. Anywhere else (a log file, a pipe, CI) nothing is drawn: each stage
goes to absl logging at INFO (shown with --verbosity=0), one line per stage and at most one batch status line every
`log_interval` seconds. `--noprogress` turns both off.

The e-graph pass reports each saturation iteration (e-nodes, rules matched, bans) and the start of extraction as
stages of their own, so a long saturation or ILP shows where it is.
"""
from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import Callable, Optional, TextIO

from absl import logging


class Progress:
    """A status line: `stage(text)` starts a stage, `status(text)` replaces the whole line (batch), `print(line)`
    writes a line of output without tearing the status line, `close()` erases it."""

    def __init__(self, enabled: bool = True, stream: Optional[TextIO] = None, prefix: str = "",
                 min_interval: float = 0.1, tick: float = 0.5, log_interval: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and _isatty(self.stream)
        self.prefix = prefix
        self.min_interval, self.tick, self.log_interval = min_interval, tick, log_interval
        self.clock = clock
        self._text = ""
        self._stage_t0 = clock()
        self._drawn = 0          # width of what is on screen now
        self._last_draw = -1e9
        self._last_log = -1e9
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if self.tty and tick > 0:
            self._thread = threading.Thread(target=self._ticker, name="tensat_tf-progress", daemon=True)
            self._thread.start()

    # -- what callers use ------------------------------------------------------------------------------------------
    def stage(self, text: str) -> None:
        """A new stage of one conversion: drawn with its elapsed seconds; logged once at INFO."""
        if not self.enabled:
            return
        with self._lock:
            self._text, self._stage_t0 = text, self.clock()
            if self.tty:
                self._draw(force=True)
            else:
                logging.info("progress: %s%s", self.prefix, text)

    def status(self, text: str) -> None:
        """Replace the status line (batch: counts and running models); logged at most every log_interval s."""
        if not self.enabled:
            return
        with self._lock:
            self._text, self._stage_t0 = text, None
            if self.tty:
                self._draw()
            elif self.clock() - self._last_log >= self.log_interval:
                self._last_log = self.clock()
                logging.info("progress: %s%s", self.prefix, text)

    def print(self, line: str, file: Optional[TextIO] = None) -> None:
        """Print a line of real output (to `file`, default stdout) without mixing it into the status line."""
        out = file if file is not None else sys.stdout
        with self._lock:
            self._erase()
            print(line, file=out, flush=True)
            if self._text:
                self._draw(force=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            self._erase()
            self._text = ""

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- drawing -----------------------------------------------------------------------------------------------------
    def _line(self) -> str:
        line = self.prefix + self._text
        if self._stage_t0 is not None:
            line += f" ({self.clock() - self._stage_t0:.1f} s)"
        width = shutil.get_terminal_size((100, 24)).columns - 1
        return line if len(line) <= width else line[:max(width - 3, 0)] + "..."

    def _draw(self, force: bool = False) -> None:
        now = self.clock()
        if not self._text or (not force and now - self._last_draw < self.min_interval):
            return
        self._last_draw = now
        line = self._line()
        pad = " " * max(self._drawn - len(line), 0)
        self.stream.write("\r" + line + pad + ("\b" * len(pad)))
        self.stream.flush()
        self._drawn = len(line)

    def _erase(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
            self._drawn = 0

    def _ticker(self) -> None:
        while not self._stop.wait(self.tick):
            with self._lock:
                self._draw()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
