"""Measure what each patch does on a real SGLang server: ab, ablate, bisect, report (the [bench] extra).

`sglang-overlay bench --help` shows the bench's own commands and options."""

from __future__ import annotations

import importlib
import sys

from ..errors import EXIT_BAD_INPUT

NAME = "bench"
HELP = "measure patches on a real server: ab, ablate, bisect, report (needs the [bench] extra)"
PIP_EXTRA = "pip install 'sglang-overlay[bench]'"
# the tool's options a measurement takes too, passed on unless the bench arguments give their own
_PASSED = ("--manifest", "--tree", "--pin")
_MEASURE = ("ab", "ablate", "bisect")
# the tool's options that take a value (the rest of the command line is the bench's own)
_VALUED = ("--project", "--manifest", "--tree", "--pin")


def split_argv(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """(the tool's arguments up to `bench`, the bench's after it), or None when the command is not `bench`.
    The bench's arguments never go through the tool's parser: `bench --help` is the bench's help."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return None
        if a.startswith("-"):
            i += 2 if a in _VALUED else 1
            continue
        return (argv[: i + 1], argv[i + 1 :]) if a == NAME else None
    return None


def add_arguments(p) -> None:
    p.set_defaults(bench_args=[])


def _bench_main():
    for name in ("sglang_overlay_bench.cli", "bench.cli"):  # installed, else a checkout's bench/
        try:
            return importlib.import_module(name).main
        except ModuleNotFoundError as e:
            if e.name not in (name, name.partition(".")[0]):
                raise
    return None


def run(ctx, args) -> int:
    """`ctx`: the project's context, or None where no project was found (the bench's own --manifest then)."""
    try:
        main = _bench_main()
    except ModuleNotFoundError as e:  # the bench is there, one of its extra's packages is not
        print(f"sglang-overlay bench: needs {e.name}, from the bench extra: {PIP_EXTRA}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if main is None:
        print(f"sglang-overlay bench: the bench is not installed: {PIP_EXTRA}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from_bench = importlib.import_module(main.__module__)
    bench_argv = list(args.bench_args)
    project = None
    if ctx is not None:
        project = ctx.manifest_path.resolve().parent
        given = {"--manifest": str(ctx.manifest_path), "--tree": ctx.tree_arg, "--pin": ctx.pin}
        if bench_argv[:1] and bench_argv[0] in _MEASURE:
            end = bench_argv.index("--") if "--" in bench_argv else len(bench_argv)
            own = {o.partition("=")[0] for o in bench_argv[1:end]}
            bench_argv[1:1] = [x for k in _PASSED if (v := given[k]) and k not in own for x in (k, str(v))]
    from ..progname import prog

    try:
        return int(
            main(
                bench_argv, prog=f"{prog(project=False, pin=False)} bench", context=from_bench.Context(project=project)
            )
            or 0
        )
    except SystemExit as e:  # argparse's --help and usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
