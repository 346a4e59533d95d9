"""A time limit for a test of code that must not block or hang (no pytest-timeout here): SIGALRM
in the main thread after ``seconds`` raises ``error``; tests/ and tests_flower/ use it."""

from __future__ import annotations

import contextlib
import signal
from typing import Iterator


@contextlib.contextmanager
def time_limit(seconds: int, error: BaseException) -> Iterator[None]:
    def alarm(signum, frame):
        raise error

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
