"""The HTTP surface (FastAPI on uvicorn): ``/v1/completions``, ``/v1/chat/completions``,
``/v1/models``, ``/health``, ``/metrics``.

Every failure is OpenAI's error object (:mod:`kern_serve.errors`), including unknown routes,
wrong methods and internal errors. A completion waits for the engine's first event before
it answers, so that an engine refusal is still a 400 (also for a stream); after that a
stream's failure is an error event followed by ``[DONE]``. A client that disconnects, at any
point, aborts its sequence (the watcher below, then Starlette's own for a running stream).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import prompts
from .errors import APIError, bad, unavailable
from .schemas import ChatBody, CompletionBody, Limits, parse
from .service import Disconnected, EngineFailed, Run, Service
from .sse import Chunks

MAX_BODY = 4 << 20  # bytes; a larger body is a 413 (a 1M-token id prompt fits in ~8 MB: no)
_json = msgspec.json.Encoder()


@dataclass
class Settings:
    model: str                      # the served model name
    api_key: str | None = None
    max_queue: int = 256            # requests waiting beyond the engine's max_seqs
    extra: dict[str, Any] = field(default_factory=dict)


def make_app(svc: Service, settings: Settings, lifespan=None) -> FastAPI:
    app = FastAPI(title="kern-serve", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.svc, app.state.settings = svc, settings

    @app.exception_handler(APIError)
    async def _api_error(_: Request, err: APIError) -> Response:
        return _error(err)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException) -> Response:
        what = {404: f"no route {request.url.path}", 405: f"method {request.method} is not "
                f"allowed on {request.url.path}"}.get(err.status_code, str(err.detail))
        return _error(APIError(err.status_code, what, None, "not_found"
                               if err.status_code == 404 else None))

    @app.exception_handler(Exception)
    async def _internal(_: Request, err: Exception) -> Response:
        return _error(APIError(500, f"internal error: {type(err).__name__}: {err}"))

    @app.get("/health")
    async def health() -> Response:
        c = svc.client
        body: dict[str, Any] = {"status": c.state, "model": settings.model,
                                "engine_pid": c.pid, "in_flight": c.in_flight()}
        if c.ready is not None:
            r = c.ready
            body.update(vocab=r.vocab, context=r.context, max_seqs=r.max_seqs,
                        kv_pages=r.pages_total, page_tokens=r.page_tokens)
        if c.state == "failed":
            body["error"] = c.failure
        return JSONResponse(body, 200 if c.state == "ready" else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(svc.metrics.render(svc.client.snapshot, svc.client.state == "ready"),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        _auth(request, settings)
        _limits(svc)
        return JSONResponse({"object": "list", "data": [_model_card(settings.model)]})

    @app.get("/v1/models/{name:path}")
    async def model(request: Request, name: str) -> Response:
        _auth(request, settings)
        _limits(svc)
        _check_model(name, settings, "model")
        return JSONResponse(_model_card(name))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _complete(request, svc, settings, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _complete(request, svc, settings, "chat")

    return app


def _error(err: APIError) -> Response:
    return JSONResponse(err.body(), err.status, headers=err.headers)


def _model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "kern"}


def _auth(request: Request, settings: Settings) -> None:
    if settings.api_key is None:
        return
    got = request.headers.get("authorization", "")
    scheme, _, key = got.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(),
                                                               settings.api_key.encode()):
        raise APIError(401, "missing or wrong API key (Authorization: Bearer …)" if got
                       else "missing API key (Authorization: Bearer …)", None,
                       "invalid_api_key")


def _check_model(name: str | None, settings: Settings, param: str = "model") -> None:
    if name is not None and name != settings.model:
        raise APIError(404, f"the model `{name}` does not exist (this server serves "
                       f"`{settings.model}`)", param, "model_not_found")


async def _body(request: Request) -> Any:
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY:
        raise APIError(413, f"request body of {int(size)} bytes: at most {MAX_BODY}", None,
                       "request_too_large")
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > MAX_BODY:
            raise APIError(413, f"request body over {MAX_BODY} bytes", None,
                           "request_too_large")
        chunks.append(chunk)
    try:
        return msgspec.json.decode(b"".join(chunks))
    except msgspec.DecodeError as err:
        raise bad(f"the body is not valid JSON: {err}", None, "invalid_json") from None


def _limits(svc: Service) -> Limits:
    c = svc.client
    if c.state == "loading":
        raise unavailable("the model is loading; retry shortly", 5)
    if c.state != "ready" or c.ready is None:
        raise unavailable(f"the engine is not available ({c.state})", 5)
    r = c.ready
    return Limits(vocab=r.vocab, context=r.context, max_tokens=r.context,
                  pool=r.pages_total * r.page_tokens)


async def _complete(request: Request, svc: Service, settings: Settings, kind: str) -> Response:
    t0 = time.perf_counter()
    endpoint = "chat" if kind == "chat" else "completions"
    try:
        resp = await _complete_inner(request, svc, settings, kind, t0)
    except APIError as err:
        svc.metrics.requests.labels(endpoint=endpoint, status=str(err.status)).inc()
        raise
    svc.metrics.requests.labels(endpoint=endpoint, status=str(resp.status_code)).inc()
    return resp


async def _complete_inner(request: Request, svc: Service, settings: Settings, kind: str,
                          t0: float) -> Response:
    _auth(request, settings)
    data = await _body(request)
    if kind == "chat":
        body = parse(ChatBody, data)
    else:
        body = parse(CompletionBody, data)
    limits = _limits(svc)
    _check_model(body.model, settings)
    prep = (prompts.chat(body, svc.tok, limits) if kind == "chat"  # type: ignore[arg-type]
            else prompts.completion(body, svc.tok, limits))       # type: ignore[arg-type]
    ready = svc.client.ready
    cap = (ready.max_seqs if ready else 0) + settings.max_queue
    if svc.client.in_flight() >= cap:
        raise unavailable(f"the queue is full ({svc.client.in_flight()} requests in flight, "
                          f"--max-queue {settings.max_queue}); retry shortly", 1)
    run = Run(svc, prep, t0)
    chunks = Chunks(run, settings.model)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        first = await _race(run.next(), watcher, run)
        if not prep.stream:
            text, finish = first
            parts = [text]
            while finish is None:
                text, finish = await _race(run.next(), watcher, run)
                parts.append(text)
            return Response(_json.encode(chunks.whole("".join(parts), finish)),
                            media_type="application/json")
    except Disconnected:
        run.abort()
        return Response(status_code=499)
    except EngineFailed as err:
        return _error(APIError(500, f"the engine failed: {err}"))
    except BaseException:
        run.abort()
        raise
    finally:
        watcher.cancel()
    return StreamingResponse(_sse(run, chunks, first), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _disconnected(request: Request) -> None:
    """Returns once the client is gone (the body is already read: the next message is
    ``http.disconnect``)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _race(step: Awaitable, watcher: asyncio.Future, run: Run):
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        return task.result()
    run.abort()
    try:
        await task
    except (Disconnected, EngineFailed, APIError):
        pass
    raise Disconnected()


async def _sse(run: Run, chunks: Chunks, first: tuple[str, str | None]) -> AsyncIterator[bytes]:
    try:
        opening = chunks.opening()
        if opening:
            yield opening
        text, finish = first
        while True:
            if text:
                yield chunks.delta(text)
            if finish is not None:
                break
            text, finish = await run.next()
        yield chunks.closing(finish)
    except EngineFailed as err:
        yield chunks.error(APIError(500, f"the engine failed: {err}").body())
    except Disconnected:
        return
    finally:
        run.abort()
    yield chunks.done()
