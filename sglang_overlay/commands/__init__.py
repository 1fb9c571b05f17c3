"""One module per command. Each has NAME, HELP, add_arguments(parser) and run(ctx, args) -> exit code."""

from . import apply, check, diff, fetch, fingerprint, rebase, recover, refresh, revert, status, toggle
from . import build_wheel, launch

COMMANDS = (
    fetch,
    status,
    apply,
    revert,
    toggle,
    diff,
    refresh,
    recover,
    fingerprint,
    check,
    rebase,
    launch,
    build_wheel,
)
