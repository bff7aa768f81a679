"""The two loads of ``kern-serve bench``, the same closed loop each: ``concurrency`` workers,
each sending its next request as soon as its previous one finished, until ``count`` requests
were sent or ``max_seconds`` passed (requests in flight then are awaited).

- :func:`through_server`: ``openai.AsyncOpenAI`` completions with a token-id prompt,
  ``stream=True``, ``stream_options.include_usage``, ``ignore_eos`` (every request generates
  exactly ``output_len`` tokens), loopback only.
- :func:`through_engine`: the same prompts submitted to an engine in this process, timed from
  its token events (no HTTP, no detokenization)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from .stats import Timing


async def through_server(base_url: str, model: str, prompts: Sequence[Sequence[int]],
                         output_len: int, concurrency: int, count: int, max_seconds: float,
                         api_key: str = "kern-bench") -> tuple[list[Timing], float]:
    import httpx
    import openai
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency)
    http = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(600.0))
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                                http_client=http)
    timings: list[Timing] = []
    sent = 0
    t0 = time.perf_counter()
    deadline = t0 + max_seconds

    async def one(prompt: Sequence[int]) -> Timing:
        t = Timing(time.perf_counter(), prompt_tokens=len(prompt))
        try:
            stream = await client.completions.create(
                model=model, prompt=list(prompt), max_tokens=output_len, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
            async for chunk in stream:
                now = time.perf_counter()
                if chunk.choices and chunk.choices[0].text:
                    t.piece(now)
                if chunk.usage is not None:
                    t.output_tokens = chunk.usage.completion_tokens
        except Exception as err:  # a failed request is counted, not fatal to the run
            t.error = f"{type(err).__name__}: {err}"[:200]
        return t

    async def worker() -> None:
        nonlocal sent
        while sent < count and time.perf_counter() < deadline:
            prompt = prompts[sent % len(prompts)]
            sent += 1
            timings.append(await one(prompt))

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await client.close()
        await http.aclose()
    return timings, time.perf_counter() - t0


def through_engine(engine: Any, prompts: Sequence[Sequence[int]], output_len: int,
                   concurrency: int, count: int, max_seconds: float,
                   tag: str = "b") -> tuple[list[Timing], float]:
    """The same closed loop on an engine object (``kern_run.engine`` API) in this process."""
    from kern_run.engine import Request
    live: dict[str, Timing] = {}
    done: list[Timing] = []
    sent = 0
    t0 = time.perf_counter()
    deadline = t0 + max_seconds

    def submit() -> None:
        nonlocal sent
        p = prompts[sent % len(prompts)]
        rid = f"{tag}-{concurrency}-{sent}"
        live[rid] = Timing(time.perf_counter(), prompt_tokens=len(p))
        engine.submit(Request(rid, tuple(p), output_len, ignore_eos=True))
        sent += 1

    while sent < min(concurrency, count):
        submit()
    while live:
        events = engine.step()
        now = time.perf_counter()
        for ev in events:
            t = live.get(ev.id)
            if t is None:
                continue
            if ev.token is not None:
                t.piece(now)
                t.output_tokens += 1
            if ev.finish is not None:
                if ev.finish not in ("length", "stop"):
                    t.error = f"finish {ev.finish}"
                done.append(live.pop(ev.id))
                if sent < count and now < deadline:
                    submit()
    return done, time.perf_counter() - t0
