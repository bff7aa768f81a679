"""Disconnects, load, start-up, queue limits, SIGTERM and a dying engine process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import httpx
import openai
import pytest

from kserve_helpers import tokenizer, wait_until

LONG = {"max_tokens": 8000, "ignore_eos": True}


def _idle(server) -> bool:
    m = server.metrics()
    return (m["kern_serve_requests_running"] == 0 and m["kern_serve_requests_waiting"] == 0
            and m["kern_serve_kv_pages_reserved"] == 0)


def _events(lines) -> list:
    """SSE ``data:`` payloads of a response's lines (JSON decoded; ``[DONE]`` kept)."""
    out = []
    for line in lines:
        if line.startswith("data: "):
            d = line[6:]
            out.append(d if d == "[DONE]" else json.loads(d))
    return out


def test_closed_stream_aborts_within_a_second(server):
    wait_until(lambda: _idle(server), 5, "the server idle before the test")
    before = server.metrics().get('kern_serve_request_finish_total{reason="abort"}', 0)
    with httpx.stream("POST", server.url + "/v1/completions", timeout=10,
                      json={"prompt": "Go on forever", "stream": True, **LONG}) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got = [ln for ln, _ in zip(lines, range(6)) if ln.startswith("data: ")]
        assert got and server.metrics()["kern_serve_kv_pages_reserved"] > 0
    closed = time.monotonic()
    wait_until(lambda: _idle(server), 1.0, "pages back in the pool after the stream closed")
    assert time.monotonic() - closed < 1.0
    after = server.metrics()['kern_serve_request_finish_total{reason="abort"}']
    assert after == before + 1


def test_cancelled_request_aborts_within_a_second(server):
    wait_until(lambda: _idle(server), 5, "the server idle before the test")

    async def go() -> float:
        c = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
        task = asyncio.ensure_future(c.completions.create(
            model="fake-smollm2", prompt="Count to a million", max_tokens=8000,
            extra_body={"ignore_eos": True}))
        await asyncio.sleep(0.3)
        assert not task.done() and server.metrics()["kern_serve_requests_running"] == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        t = time.monotonic()
        await c.close()
        return t

    cancelled = asyncio.run(go())
    wait_until(lambda: _idle(server), 1.0, "pages back in the pool after the cancel")
    assert time.monotonic() - cancelled < 1.0


async def _complete_all(url: str, key: str, model: str, prompts: list[str], max_tokens: int,
                        stream_every: int = 2) -> list[tuple[str, str, int]]:
    c = openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)

    async def one(i: int, p: str) -> tuple[str, str, int]:
        if i % stream_every:
            r = await c.completions.create(model=model, prompt=p, max_tokens=max_tokens,
                                           extra_body={"ignore_eos": True})
            return r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens
        s = await c.completions.create(model=model, prompt=p, max_tokens=max_tokens,
                                       stream=True, stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True})
        text, finish, n = "", None, 0
        async for ch in s:
            for choice in ch.choices:
                text += choice.text
                finish = choice.finish_reason or finish
            if ch.usage:
                n = ch.usage.completion_tokens
        return text, finish, n

    try:
        return await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    finally:
        await c.close()


def test_a_pool_of_four_under_32_clients(small_pool_server, ref):
    # 16 usable pages; each request takes ceil((prompt + 40) / 16) = 4 pages: 4 at a time
    prompts = [f"Client {i} asks:" for i in range(32)]
    assert all(len(tokenizer().encode(p)) + 40 <= 64 for p in prompts)
    t0 = time.monotonic()
    out = asyncio.run(_complete_all(small_pool_server.url, "sk-test", "kern-test", prompts, 40))
    assert time.monotonic() - t0 < 60
    for p, (text, finish, n) in zip(prompts, out):
        want, _ = ref.tokens(tokenizer().encode(p), 40, ignore_eos=True)
        assert (text, finish, n) == (tokenizer().decode(want), "length", 40)
    wait_until(lambda: _idle(small_pool_server), 2, "the small pool idle again")


def test_64_concurrent_streams(server, ref):
    prompts = [f"Stream number {i}:" for i in range(64)]
    out = asyncio.run(_complete_all(server.url, "x", "fake-smollm2", prompts, 16,
                                    stream_every=1))
    for p, (text, finish, n) in zip(prompts, out):
        want, _ = ref.tokens(tokenizer().encode(p), 16, ignore_eos=True)
        assert (text, finish, n) == (tokenizer().decode(want), "length", 16)
    m = server.metrics()
    assert m["kern_serve_kv_pages_reserved"] == 0


def test_health_is_503_until_ready_then_the_queue_limit(loading_server):
    s = loading_server
    first = wait_until(s.health, 30, "the API process listening")
    assert first.status_code == 503 and first.json()["status"] == "loading"
    r = httpx.post(s.url + "/v1/completions", json={"prompt": "x"})
    assert r.status_code == 503 and r.headers["retry-after"].isdigit()
    assert r.json()["error"]["type"] == "server_error"
    assert httpx.get(s.url + "/v1/models").status_code == 503
    s.gate.touch()
    s.wait_ready()
    # --max-seqs 1 --max-queue 0: a second request while one runs gets 503 + Retry-After
    with httpx.stream("POST", s.url + "/v1/completions", timeout=10,
                      json={"prompt": "first", "max_tokens": 40, "stream": True}) as running:
        lines = running.iter_lines()   # one iterator: a dropped one closes the stream
        next(lines)
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "second", "max_tokens": 2})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "queue is full" in r.json()["error"]["message"]
        events = _events(lines)
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"


def test_killed_engine_process_fails_requests_and_exits_nonzero(kill_server):
    s = kill_server
    pid = s.engine_pid()
    with httpx.stream("POST", s.url + "/v1/completions", timeout=10,
                      json={"prompt": "doomed", "stream": True, **LONG}) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        os.kill(pid, signal.SIGKILL)
        events = _events(lines)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["type"] == "server_error"
    assert "engine" in events[-2]["error"]["message"]
    assert s.wait_exit(15) != 0
    assert "kern-serve: the engine failed" in s.log and "Traceback" not in s.log


def test_sigterm_drains_in_flight_streams_and_exits_0(sigterm_server):
    s = sigterm_server
    pid = s.engine_pid()

    async def go():
        c = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        streams = [await c.completions.create(model="fake-smollm2", prompt=f"drain {i}",
                                              max_tokens=60, stream=True,
                                              extra_body={"ignore_eos": True})
                   for i in range(3)]
        s.proc.send_signal(signal.SIGTERM)

        async def read(st):
            finish = None
            async for ch in st:
                finish = ch.choices[0].finish_reason or finish
            return finish

        out = await asyncio.gather(*(read(st) for st in streams))
        await c.close()
        return out

    assert asyncio.run(go()) == ["length"] * 3
    assert s.wait_exit(15) == 0
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 5, "the engine process gone")
    with pytest.raises(httpx.ConnectError):
        httpx.get(s.url + "/health")
