"""Request bodies of ``/v1/completions`` and ``/v1/chat/completions``: parsed with pydantic,
checked against what kern does, turned into a :class:`Prepared` request or an
:class:`~kern_serve.errors.APIError` (400 naming ``param``).

kern decodes greedily, one sequence per request. Refused (400): more than one choice
(``n``, ``best_of``, several prompts), sampling (``temperature > 0`` unless ``top_k = 1``),
penalties, ``logit_bias``, ``logprobs``/``top_logprobs``, tools and functions,
``response_format`` other than text, ``suffix``, non-text content parts (images, audio,
files), ``stream_options`` without ``stream``, any parameter not listed here. Ignored:
``user``, ``seed``, ``top_p`` and ``top_k``/``min_p`` when decoding is greedy anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import APIError, bad

MAX_STOPS = 4
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for the legacy completions endpoint
#: A chat request without max_tokens gets the rest of the context, at most this many: the
#: engine reserves prompt + max_tokens of KV pages at admission, so "the whole context"
#: would hold a whole pool's worth of pages per request.
CHAT_DEFAULT_MAX_TOKENS = 1024


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    max_tokens: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: Any = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    user: str | None = None


class CompletionBody(_Body):
    prompt: Any
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None
    best_of: int | None = None


class ChatBody(_Body):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None


@dataclass
class Limits:
    """What the engine takes (from its Ready message)."""
    vocab: int
    context: int       # prompt + max_tokens of one request
    max_tokens: int    # the default max_tokens of a chat request without one
    pool: int = 0      # KV slots the pool can give one sequence (0: not known)


@dataclass
class Prepared:
    kind: Literal["completion", "chat"]
    prompt: list[int]
    max_tokens: int
    stops: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    stream: bool = False
    include_usage: bool = False
    echo: str | None = None      # the prompt text to send before the completion (echo)


def parse(model: type[_Body], data: Any) -> _Body:
    if not isinstance(data, dict):
        raise bad("the request body must be a JSON object", None, "invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        e = err.errors()[0]
        param = _param(e.get("loc", ()))
        if e.get("type") == "extra_forbidden":
            raise bad(f"unsupported parameter: `{param}`", param, "unsupported_parameter") \
                from None
        if e.get("type") == "missing":
            raise bad(f"`{param}` is required", param, "missing_required_parameter") from None
        raise bad(f"`{param}`: {e.get('msg', 'invalid')}", param) from None


def _param(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def check_common(b: _Body, limits: Limits, max_tokens_param: str = "max_tokens") -> None:
    """The checks both endpoints share (everything but the prompt)."""
    if b.n != 1:
        raise bad(f"n = {b.n}: kern returns one choice per request (n = 1)", "n")
    greedy_sampling = b.temperature is None or b.temperature == 0 or b.top_k == 1
    if b.temperature is not None and b.temperature < 0:
        raise bad(f"temperature = {b.temperature} must be ≥ 0", "temperature")
    if not greedy_sampling:
        raise bad(f"temperature = {b.temperature}: kern decodes greedily; give temperature 0 "
                  f"(or top_k = 1)", "temperature", "unsupported_value")
    if b.top_p is not None and not 0 < b.top_p <= 1:
        raise bad(f"top_p = {b.top_p} must be in (0, 1]", "top_p")
    for name, neutral in (("presence_penalty", 0.0), ("frequency_penalty", 0.0),
                          ("repetition_penalty", 1.0)):
        v = getattr(b, name)
        if v is not None and v != neutral:
            raise bad(f"{name} = {v}: kern applies no penalties", name, "unsupported_value")
    if b.logit_bias:
        raise bad("logit_bias: kern applies no logit bias", "logit_bias", "unsupported_value")
    if b.stream_options is not None:
        if not b.stream:
            raise bad("stream_options is only allowed with stream = true", "stream_options")
        extra = set(b.stream_options) - {"include_usage"}
        if extra:
            raise bad(f"stream_options.{sorted(extra)[0]} is not supported", "stream_options")
        if not isinstance(b.stream_options.get("include_usage", False), bool):
            raise bad("stream_options.include_usage must be a boolean",
                      "stream_options.include_usage")
    if b.max_tokens is not None and b.max_tokens < 1:
        raise bad(f"{max_tokens_param} = {b.max_tokens} must be at least 1", max_tokens_param)
    stops(b.stop)
    for i, t in enumerate(b.stop_token_ids or []):
        if not 0 <= t < limits.vocab:
            raise bad(f"stop_token_ids[{i}] = {t} is outside the vocabulary (0 … "
                      f"{limits.vocab - 1})", "stop_token_ids")


def stops(stop: Any) -> list[str]:
    if stop is None:
        return []
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise bad("stop must be a string or a list of strings", "stop")
    if len(items) > MAX_STOPS:
        raise bad(f"stop: at most {MAX_STOPS} stop strings (got {len(items)})", "stop")
    if any(not s for s in items):
        raise bad("stop: a stop string may not be empty", "stop")
    return list(items)


def check_prompt_ids(ids: list[int], limits: Limits, param: str) -> None:
    if not ids:
        raise bad(f"{param} is empty", param, "empty_prompt")
    for i, t in enumerate(ids):
        if not 0 <= t < limits.vocab:
            raise bad(f"{param}: token id {t} (at {i}) is outside the vocabulary (0 … "
                      f"{limits.vocab - 1})", param, "invalid_token")


def budget(n_prompt: int, asked: int | None, default: int | None, limits: Limits,
           prompt_param: str, max_tokens_param: str) -> int:
    """The request's max_tokens: asked, or the endpoint's default clipped to the context.
    A prompt and completion that do not fit are a 400 ``context_length_exceeded`` naming
    the prompt when even one generated token does not fit, else max_tokens (the engine's
    rule, ``kern_run.engine.checks``)."""
    room = limits.context - n_prompt
    if room < 1:
        raise APIError(400, f"the prompt is {n_prompt} tokens; this model's context of "
                       f"{limits.context} tokens leaves no room for a completion: shorten it "
                       f"to at most {limits.context - 1}", prompt_param,
                       "context_length_exceeded")
    if asked is None:
        fit = limits.pool - n_prompt if limits.pool else room
        return max(1, min(default if default is not None else limits.max_tokens, room, fit))
    if asked > room:
        raise APIError(400, f"this model's maximum context length is {limits.context} tokens; "
                       f"the request asks for {n_prompt + asked} ({n_prompt} in the prompt, "
                       f"{asked} in the completion): lower {max_tokens_param} to at most "
                       f"{room}", max_tokens_param, "context_length_exceeded")
    return asked
