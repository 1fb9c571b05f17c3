"""Roll back a command that was interrupted (killed, or stopped by a full disk or a read-only file system) and
remove what it left behind. Every command that changes a tree does this first; `recover` does only this."""

from __future__ import annotations

from ._common import open_tree

NAME = "recover"
HELP = "roll back an interrupted command now (every changing command does this first)"


def add_arguments(p) -> None:
    pass


def run(ctx, args) -> int:
    with open_tree(ctx) as txn:
        if txn.recovered is None:
            print(f"nothing to recover: no interrupted command in {ctx.tree.root}")
        else:
            print(
                f"recovered: rolled back `{txn.recovered.op}`; the tree carries "
                f"{', '.join(txn.state.applied) or 'no patches'}"
            )
    return 0
