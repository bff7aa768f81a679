"""The two endpoints' bodies -> :class:`~kern_serve.schemas.Prepared` (token ids and limits).

- Completions: ``prompt`` is a string or one token-id list (also the one-element list forms
  ``["text"]`` and ``[[ids]]``); several prompts are refused (one choice per request).
  ``echo`` sends the prompt's text (decoded from the ids) before the completion.
- Chat: the model's own chat template (kern-run's rendering: ChatML directly, anything else in
  jinja2's sandbox) over the messages, with the generation prompt.
- One BOS: text is encoded without the tokenizer's special tokens, then the BOS is added only
  when the tokenizer adds one and the text does not already start with it (a template that
  writes ``{{ bos_token }}`` itself gets no second one). Token-id prompts are taken as given.
"""

from __future__ import annotations

from typing import Any

from kern_run.errors import KernRunError
from kern_run.tokenizer import TextTokenizer, render_chat

from .errors import bad
from .schemas import (CHAT_DEFAULT_MAX_TOKENS, COMPLETIONS_DEFAULT_MAX_TOKENS, ChatBody, CompletionBody, Limits,
                      Prepared, budget, check_common, check_prompt_ids, stops)

ROLES = {"system", "developer", "user", "assistant"}


def adds_bos(tok: TextTokenizer) -> bool:
    if tok.bos_id is None:
        return False
    return tok.tokenizer.encode("a", add_special_tokens=True).ids[:1] == [tok.bos_id]


def encode_text(tok: TextTokenizer, text: str) -> list[int]:
    ids = tok.tokenizer.encode(text, add_special_tokens=False).ids
    if adds_bos(tok) and ids[:1] != [tok.bos_id]:
        ids = [tok.bos_id] + ids  # type: ignore[list-item]
    return ids


def completion(b: CompletionBody, tok: TextTokenizer, limits: Limits) -> Prepared:
    check_common(b, limits)
    if b.best_of not in (None, 1):
        raise bad(f"best_of = {b.best_of}: kern returns one choice per request", "best_of")
    if b.logprobs is not None:
        raise bad("logprobs: kern returns no log probabilities", "logprobs",
                  "unsupported_value")
    if b.suffix:
        raise bad("suffix: kern does not insert (no suffix)", "suffix", "unsupported_value")
    ids, text = _completion_prompt(b.prompt, tok)
    check_prompt_ids(ids, limits, "prompt")
    n = budget(len(ids), b.max_tokens, COMPLETIONS_DEFAULT_MAX_TOKENS, limits, "prompt",
               "max_tokens")
    echo = None
    if b.echo:
        echo = text if text is not None else tok.decode(ids)
    return Prepared("completion", ids, n, stops(b.stop), list(b.stop_token_ids or []),
                    b.ignore_eos, b.stream, _usage(b), echo)


def _completion_prompt(p: Any, tok: TextTokenizer) -> tuple[list[int], str | None]:
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]
    if isinstance(p, str):
        if not p:
            raise bad("prompt is empty", "prompt", "empty_prompt")
        return encode_text(tok, p), p
    if isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return list(p), None
    if isinstance(p, list) and p and all(isinstance(x, (str, list)) for x in p):
        raise bad(f"prompt: {len(p)} prompts in one request; kern takes one prompt per "
                  f"request", "prompt")
    raise bad("prompt must be a string or a list of token ids", "prompt")


def chat(b: ChatBody, tok: TextTokenizer, limits: Limits) -> Prepared:
    if b.max_completion_tokens is not None:
        if b.max_tokens is not None and b.max_tokens != b.max_completion_tokens:
            raise bad("max_tokens and max_completion_tokens disagree: give one",
                      "max_completion_tokens")
        b.max_tokens = b.max_completion_tokens
        mt_param = "max_completion_tokens"
    else:
        mt_param = "max_tokens"
    check_common(b, limits, mt_param)
    _chat_unsupported(b)
    if tok.chat_template is None:
        raise bad("this model's tokenizer data carries no chat template: use /v1/completions",
                  "messages", "unsupported_value")
    msgs = [_message(i, m) for i, m in enumerate(b.messages)]
    if not msgs:
        raise bad("messages is empty", "messages", "empty_prompt")
    try:
        text = render_chat(tok.chat_template, msgs, bos=tok.tokenizer.id_to_token(tok.bos_id)
                           if tok.bos_id is not None else "")
    except KernRunError as err:
        raise bad(f"messages: {err}", "messages") from None
    ids = encode_text(tok, text)
    check_prompt_ids(ids, limits, "messages")
    n = budget(len(ids), b.max_tokens, CHAT_DEFAULT_MAX_TOKENS, limits, "messages", mt_param)
    return Prepared("chat", ids, n, stops(b.stop), list(b.stop_token_ids or []),
                    b.ignore_eos, b.stream, _usage(b))


def _chat_unsupported(b: ChatBody) -> None:
    if b.logprobs or b.top_logprobs is not None:
        raise bad("logprobs: kern returns no log probabilities",
                  "logprobs" if b.logprobs else "top_logprobs", "unsupported_value")
    if b.tools or b.functions:
        raise bad("tools: kern does not call tools", "tools" if b.tools else "functions",
                  "unsupported_value")
    for name in ("tool_choice", "function_call"):
        v = getattr(b, name)
        if v not in (None, "none"):
            raise bad(f"{name}: kern does not call tools", name, "unsupported_value")
    if b.response_format is not None and b.response_format.get("type", "text") != "text":
        raise bad(f"response_format {b.response_format.get('type')!r}: kern generates plain "
                  f"text only", "response_format", "unsupported_value")


def _message(i: int, m: dict[str, Any]) -> dict[str, str]:
    where = f"messages[{i}]"
    role = m.get("role")
    if role in ("tool", "function") or m.get("tool_calls") or m.get("function_call"):
        raise bad(f"{where}: tool messages and tool calls are not supported (kern does not "
                  f"call tools)", f"{where}.role", "unsupported_value")
    if role not in ROLES:
        raise bad(f"{where}.role {role!r}: one of {', '.join(sorted(ROLES))}",
                  f"{where}.role")
    extra = set(m) - {"role", "content", "name"}
    if extra:
        raise bad(f"{where}.{sorted(extra)[0]} is not supported", f"{where}.{sorted(extra)[0]}",
                  "unsupported_parameter")
    return {"role": "system" if role == "developer" else role,
            "content": _content(where, m.get("content"))}


def _content(where: str, c: Any) -> str:
    if isinstance(c, str):
        return c
    if c is None:
        raise bad(f"{where}.content is required", f"{where}.content")
    if not isinstance(c, list):
        raise bad(f"{where}.content must be a string or a list of text parts",
                  f"{where}.content")
    texts = []
    for j, part in enumerate(c):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            what = "images" if kind == "image_url" else f"content parts of type {kind!r}"
            raise bad(f"{where}.content[{j}]: {what} are not supported (kern is text only)",
                      f"{where}.content[{j}]", "unsupported_value")
        texts.append(part["text"])
    return "\n".join(texts)


def _usage(b) -> bool:
    return bool(b.stream_options and b.stream_options.get("include_usage"))
