"""Which dummy weights the server draws (the dummy_init_normal fixture, tests/bench/planted), read as the server
reads SGLANG_DUMMY_INIT*. `normal`: N(0, std) by name; its greedy choices are near ties (bench/results/greedy_ties).
`successor`: embeddings N(0, embed_std), lm_head rows the embeddings permuted: the text follows a fixed successor
by many logits, which survives rounding and a draft learns (bench/results/successor_cpu).
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
DEFAULT_STD, DEFAULT_EMBED_STD = 0.02, 1.0  # the patch's defaults


@dataclass(frozen=True)
class DummyInit:
    mode: str = "normal"
    std: float = DEFAULT_STD
    embed_std: float = DEFAULT_EMBED_STD  # read only in `successor`

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"dummy init mode {self.mode!r} is not one of {MODES}")

    def record(self) -> dict:
        """train.json's account; from_env reads it back."""
        out: dict = {ENV_MODE: self.mode, ENV_STD: self.std}
        if self.mode == "successor":
            out[ENV_EMBED_STD] = self.embed_std
        return {**out, "seed": SEED}

    def describe(self) -> str:
        extra = f", embeddings at {self.embed_std:g}, lm_head = embeddings permuted" if self.mode == "successor" else ""
        return f"{self.mode} dummy weights at std {self.std:g}{extra}"


def _number(env: Mapping[str, str], name: str, default: float, where: str) -> float:
    raw = env.get(name, "")  # empty: the default, as the server reads it
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise DraftInputError(
            f"{where}{name}={raw!r} is not a positive number",
            hint=f"set it to the server's value or unset it (e.g. {default})",
        )
    return value


def from_env(environ: Mapping[str, str] | None = None, *, mode: str | None = None, where: str = "") -> DummyInit:
    """The weights a server started with `environ` draws (`mode` wins over SGLANG_DUMMY_INIT)."""
    env = os.environ if environ is None else environ
    m = mode or env.get(ENV_MODE, "") or "normal"
    if m not in MODES:
        raise DraftInputError(
            f"{where}{ENV_MODE}={m!r} is not one of {', '.join(MODES)}",
            hint="the bench's targets run with SGLANG_DUMMY_INIT=normal or =successor (tests/bench/planted)",
        )
    std = _number(env, ENV_STD, DEFAULT_STD, where)
    if m != "successor":
        return DummyInit(m, std)  # a normal server ignores the embedding std: so does the reference
    return DummyInit(m, std, _number(env, ENV_EMBED_STD, DEFAULT_EMBED_STD, where))
