"""Which dummy weights the server draws (the dummy_init_normal bench fixture, tests/bench/planted), as one typed
value that train-draft, server-seqs' files and the reference target all read.

`normal`: norm gains 1, biases 0, every other weight N(0, std) seeded by its name. Its greedy choice is a near tie
(bench/results/greedy_ties: the top-2 gap is the vocabulary's extreme-value spacing, about 0.15 logit SDs), so two
GPUs' or two kernels' roundings give different text within a few tokens.

`successor`: `normal`, plus embeddings N(0, embed_std) and the lm_head's rows the embedding's rows, unit length, in
a seeded random order. The residual stream keeps the last token's embedding, so greedy decoding follows a fixed
successor of the last token with a margin of many logits: the text survives rounding, a draft can learn it, and
EAGLE-3 = plain decoding becomes a check of speculative decoding's bookkeeping. It is not a check of a kernel's
numerics: the margin hides small errors, which `normal` shows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import DraftInputError

MODES = ("normal", "successor")
SEED = 1234  # initialize_dummy_weights' default, which DummyModelLoader passes on
ENV_MODE, ENV_STD, ENV_EMBED_STD = "SGLANG_DUMMY_INIT", "SGLANG_DUMMY_INIT_STD", "SGLANG_DUMMY_INIT_EMBED_STD"
ENV_NAMES = (ENV_MODE, ENV_STD, ENV_EMBED_STD)
DEFAULT_STD = 0.02  # the patch's default for SGLANG_DUMMY_INIT_STD
DEFAULT_EMBED_STD = 1.0  # the patch's default for SGLANG_DUMMY_INIT_EMBED_STD


@dataclass(frozen=True)
class DummyInit:
    mode: str = "normal"
    std: float = DEFAULT_STD
    embed_std: float = DEFAULT_EMBED_STD  # read only in `successor`

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"dummy init mode {self.mode!r} is not one of {MODES}")

    def record(self) -> dict:
        """train.json's account (a `normal` one as earlier records wrote it)."""
        out: dict = {ENV_MODE: self.mode, ENV_STD: self.std}
        if self.mode == "successor":
            out[ENV_EMBED_STD] = self.embed_std
        out["seed"] = SEED
        return out

    def describe(self) -> str:
        extra = f", embeddings at {self.embed_std:g}, lm_head = embeddings permuted" if self.mode == "successor" else ""
        return f"{self.mode} dummy weights at std {self.std:g}{extra}"


def _positive(value: float, what: str, example: float, hint: str) -> float:
    if not 0 < value < math.inf:
        raise DraftInputError(f"{what} is not a positive number", hint=f"{hint} (e.g. {example})")
    return value


def _number(environ: Mapping[str, str], name: str, default: float, where: str) -> float:
    raw = environ.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = math.nan
    return _positive(value, f"{where}{name}={raw!r}", default, "set it to the server's value or unset it")


def from_env(
    environ: Mapping[str, str] | None = None,
    *,
    mode: str | None = None,
    std: float | None = None,
    embed_std: float | None = None,
    where: str = "",
) -> DummyInit:
    """The weights a server started with `environ` draws (given values win); DraftInputError names the variable."""
    env = os.environ if environ is None else environ
    m = mode if mode is not None else (env.get(ENV_MODE, "") or "normal")
    if m not in MODES:
        raise DraftInputError(
            f"{where}{ENV_MODE}={m!r} is not one of {', '.join(MODES)}",
            hint="the bench's targets run with SGLANG_DUMMY_INIT=normal or =successor (tests/bench/planted)",
        )
    if std is not None:
        s = _positive(std, f"--std {std}", DEFAULT_STD, "--std")
    else:
        s = _number(env, ENV_STD, DEFAULT_STD, where)
    if m != "successor":
        return DummyInit(m, s)  # a normal server ignores the embedding std: so does the reference
    if embed_std is not None:
        e = _positive(embed_std, f"--embed-std {embed_std}", DEFAULT_EMBED_STD, "--embed-std")
    else:
        e = _number(env, ENV_EMBED_STD, DEFAULT_EMBED_STD, where)
    return DummyInit(m, s, e)
