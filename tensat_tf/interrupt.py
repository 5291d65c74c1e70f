"""A stop the user asked for (Ctrl-C or SIGTERM), kept as a flag the library checks where it can stop cleanly.

Why a flag beside the KeyboardInterrupt the CLI's handler raises: the exception lands wherever Python happens to be,
and native code can turn it into something else. A pybind11 module whose initialization is interrupted raises
"ImportError: initialization failed", and TF imports many modules under `try: ... except ImportError`, so the
interrupt can vanish and the run go on to publish. With the flag, the next check (each stage of convert, and
save.publish before anything is moved into place) raises it again; the CLI also reads it to report an error that
an interrupt caused as the interrupt (tensat_tf/cli/main.py).
"""
from __future__ import annotations

_requested = False


def request() -> None:
    """Record that the user asked to stop (the CLI's signal handler; never undone within a process)."""
    global _requested
    _requested = True


def requested() -> bool:
    return _requested


def check() -> None:
    """Raise KeyboardInterrupt if a stop was asked for: for the places where stopping leaves nothing half-done."""
    if _requested:
        raise KeyboardInterrupt
