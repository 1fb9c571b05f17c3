"""The bench's failures, inside the package's one hierarchy (sglang_overlay.errors)."""

from __future__ import annotations

from sglang_overlay.errors import EXIT_BAD_INPUT, BadInput, OverlayError, PatchSetError

EXIT_ABORTED = 3  # a server failed to start or to serve: the store keeps what was measured
EXIT_BUDGET = 4  # stopped before a start that would overrun --time-budget: resumable


class BenchError(OverlayError):
    """A bench run could not go on; the message names the arm and the way out."""


class SetError(BenchError, PatchSetError):
    """A patch-set expression does not name a set of this manifest."""

    exit_code = EXIT_BAD_INPUT


class DraftInputError(BenchError, BadInput):
    """train-draft cannot use a model dir: the message names the file and key and the fix."""

    exit_code = EXIT_BAD_INPUT


class RecordError(BenchError, BadInput):
    """A recorded run (results.jsonl) cannot be read or holds no measured start: the message names the file."""

    exit_code = EXIT_BAD_INPUT


class UsageError(BenchError, BadInput):
    """The bench's own arguments do not make a measurement (an arm spec, a bound, a combination of flags)."""

    exit_code = EXIT_BAD_INPUT


class RunAborted(BenchError):
    exit_code = EXIT_ABORTED


class BudgetExhausted(BenchError):
    """The next server start would not finish within --time-budget: stop cleanly, keep everything."""

    exit_code = EXIT_BUDGET


class WriteFailed(BenchError):
    """The OS refused a derived file (a full disk, a read-only directory): the message names the file, the
    error and the fix; the previous file is as it was."""


class ServerSeqsError(BenchError):
    """bench server-seqs could not get the server's continuations (it did not start, or /generate answered
    otherwise than SGLang's): the message names the request and the field."""

    exit_code = EXIT_ABORTED


def run_reported(prog: str, call, interrupted: str) -> int:
    """A command's body with its failures as users see them: the package's errors as the message and their
    exit code (never a traceback), Ctrl-C as 130 and what it left as it was."""
    import sys

    try:
        call()
    except OverlayError as e:
        print(f"{prog}: {e.render()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; {interrupted}", file=sys.stderr)
        return 130
    return 0
