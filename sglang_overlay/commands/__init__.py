"""One module per command. Each has NAME, HELP, add_arguments(parser) and run(ctx, args) -> exit code."""

from . import (
    apply,
    build_wheel,
    check,
    diff,
    fetch,
    fingerprint,
    launch,
    rebase,
    recover,
    refresh,
    revert,
    status,
    toggle,
)

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
