"""``kern-serve bench``: the same closed-loop load through kern-serve (the real ``openai``
client, streaming) and through the engine in this process, in one run, at each concurrency;
plus plain batch-1 ``kern-run`` decode on the same runtime (the TPOT reference).

Order: the server is started (unless ``--url``) on a free loopback port with the model
options and measured at every level, then stopped; then the engine is built here with the
same options (the same factory as the server's engine process) and measured at every level;
then plain decode of one prompt. Each level is preceded by one unmeasured warm-up request."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from kern_run.errors import KernRunError

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


@dataclass
class BenchOptions:
    url: str | None = None
    concurrency: str = "1,4,16,32,64"
    input_len: int = 1024
    output_len: int = 128
    requests: int = 0
    max_seconds: float = 120.0
    engine: bool = True
    seed: int = 0
    serve: Any = None                      # kern_serve.server.ServeOptions
    levels: list[int] = field(default_factory=list)


def check(o: BenchOptions) -> None:
    problems = []
    try:
        o.levels = [int(x) for x in o.concurrency.split(",") if x.strip()]
    except ValueError:
        o.levels = []
    if not o.levels or min(o.levels) < 1:
        problems.append(f"--concurrency {o.concurrency!r}: give positive counts, e.g. 1,4,16")
    for name, v in (("--input-len", o.input_len), ("--output-len", o.output_len)):
        if v < 1:
            problems.append(f"{name} must be at least 1 (got {v})")
    if o.requests < 0 or o.max_seconds <= 0:
        problems.append("--requests must be ≥ 0 and --max-seconds > 0")
    if o.url is not None:
        host = urlparse(o.url).hostname
        if host not in LOOPBACK:
            problems.append(f"--url {o.url}: the load generator only talks to loopback "
                            f"(127.0.0.1, localhost, ::1)")
        if o.engine:
            problems.append("--url measures a server started elsewhere: add --no-engine (the "
                            "in-process engine needs the model options here)")
    if problems:
        raise KernRunError(*problems)


def prompts_for(o: BenchOptions, vocab: int) -> list[list[int]]:
    """Random token ids (seeded), enough distinct prompts for the largest level."""
    import numpy as np
    rng = np.random.default_rng(o.seed)
    n = max(o.levels) * 2
    return [rng.integers(100, max(vocab - 100, 101), o.input_len).tolist() for _ in range(n)]


@dataclass
class Report:
    data: dict[str, Any]

    def json(self) -> str:
        return json.dumps(self.data, indent=2)

    def table(self) -> str:
        head = (f"kern-serve bench: {self.data['model']}, {self.data['input_len']} in / "
                f"{self.data['output_len']} out, closed loop")
        cols = ("conc", "side", "done", "out tok/s", "vs engine", "TTFT p50", "TTFT p99",
                "TPOT p50", "TPOT p99", "ITL p50", "ITL p99")
        rows = [cols]
        for lvl in self.data["levels"]:
            eng = lvl.get("engine")
            for side in ("server", "engine"):
                s = lvl.get(side)
                if s is None:
                    continue
                ratio = (f"{s['output_tok_s'] / eng['output_tok_s']:.1%}"
                         if side == "server" and eng and eng["output_tok_s"] else "")
                rows.append((str(lvl["concurrency"]), side,
                             f"{s['completed']}/{s['completed'] + s['failed']}",
                             f"{s['output_tok_s']:,.0f}", ratio,
                             *(_ms(s[k][p]) for k in ("ttft", "tpot", "itl")
                               for p in ("p50_ms", "p99_ms"))))
        widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
        lines = [head] + ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
        plain = self.data.get("plain_decode_ms_per_token")
        if plain:
            lines.append(f"plain kern-run decode (batch 1, same runtime): {plain:.3f} ms/token")
        return "\n".join(lines)


def _ms(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.1f} ms"


def run_bench(o: BenchOptions) -> Report:
    from .run import run_bench as run
    return run(o)
