"""Ctrl-C, SIGTERM and SIGHUP.

Outside a transaction a signal interrupts at once: nothing has been written there, so stopping is safe. Inside
one (`held()`), the signal is only noted, and `checkpoint()` raises it where the transaction can still roll
back; the rollback itself runs held, so a second Ctrl-C cannot cut it short. Either way the command ends with
`Interrupted`, which the CLI turns into exit 130.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_depth = 0
_pending: int | None = None
_settled = False


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum: int, _frame: object) -> None:
    global _pending
    if _settled:
        return
    if _depth:
        _pending = _pending or signum
        return
    raise Interrupted(signum)


def install() -> dict[int, object]:
    """Returns the handlers replaced, for `restore`."""
    global _settled, _pending
    _settled, _pending = False, None
    return {sig: signal.signal(sig, _on_signal) for sig in SIGNALS}


def restore(previous: dict[int, object]) -> None:
    """A caller that runs the CLI inside its own process (main(argv)) gets its own handlers back."""
    global _settled
    for sig, handler in previous.items():
        signal.signal(sig, handler)  # type: ignore[arg-type]
    _settled = False


def settle() -> None:
    """The command's outcome is decided (its exit code is known): from here to the process's end a signal is
    ignored, so that a change that was made is not reported, or killed, as interrupted."""
    global _settled, _pending
    if _settled:
        return
    _settled, _pending = True, None
    for sig in SIGNALS:
        if signal.getsignal(sig) is _on_signal:
            signal.signal(sig, signal.SIG_IGN)


def checkpoint() -> None:
    """Raise the signal noted while held, if any."""
    global _pending
    if _pending is not None:
        signum, _pending = _pending, None
        raise Interrupted(signum)


@contextmanager
def held() -> Iterator[None]:
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if not _depth:
        checkpoint()


def exit_at_start() -> None:
    """Until main() installs `install`'s handlers: exit 130 quietly (nothing is written before that)."""

    def stop(signum: int, _frame: object) -> None:
        import os

        os.write(2, b"interrupted\n")
        os._exit(130)

    for sig in SIGNALS:
        signal.signal(sig, stop)
