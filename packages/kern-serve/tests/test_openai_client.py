"""The real ``openai`` client against kern-serve over the fake engine: streaming and
non-streaming agree with each other and with the fake engine's batch-1 output; stop strings,
split characters, echo, stop ids, usage."""

from __future__ import annotations

import pytest

from kserve_scripted import SCRIPTS, script_ids

PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "1, 2, 3, 4,",
           "naïve café — 日本語 🤖"]


def _stream_text(stream) -> tuple[str, str | None, object, list[str]]:
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text = c.text if hasattr(c, "text") else (c.delta.content or "")
            if text:
                pieces.append(text)
            finish = c.finish_reason or finish
    return "".join(pieces), finish, usage, pieces


def _chat_stream(stream):
    pieces, finish, usage, roles = [], None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                pieces.append(c.delta.content)
            finish = c.finish_reason or finish
    return "".join(pieces), finish, usage, roles


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completions_stream_equals_non_stream_equals_the_engine(client, model, tok, ref, prompt):
    whole = client.completions.create(model=model, prompt=prompt, max_tokens=24)
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=24, stream=True,
                                       stream_options={"include_usage": True})
    text, finish, usage, pieces = _stream_text(stream)
    want, want_finish = ref.text(tok.encode(prompt), 24)
    assert whole.choices[0].text == text == want
    assert whole.choices[0].finish_reason == finish == want_finish
    assert whole.usage.model_dump() == usage.model_dump()
    assert usage.prompt_tokens == len(tok.encode(prompt))
    assert usage.completion_tokens == len(ref.tokens(tok.encode(prompt), 24)[0])
    assert all("\ufffd" not in p for p in pieces)


@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_chat_stream_equals_non_stream(client, model, tok, ref, prompt):
    msgs = [{"role": "user", "content": prompt}]
    whole = client.chat.completions.create(model=model, messages=msgs, max_tokens=20)
    text, finish, usage, roles = _chat_stream(client.chat.completions.create(
        model=model, messages=msgs, max_tokens=20, stream=True,
        stream_options={"include_usage": True}))
    ids = tok.encode(tok.chat_prompt(prompt))
    want, want_finish = ref.text(ids, 20)
    assert whole.choices[0].message.content == text == want
    assert whole.choices[0].message.role == "assistant" and roles == ["assistant"]
    assert whole.choices[0].finish_reason == finish == want_finish
    assert whole.usage.prompt_tokens == usage.prompt_tokens == len(ids)
    assert whole.usage.completion_tokens == usage.completion_tokens


def test_no_usage_chunk_without_include_usage(client, model):
    chunks = list(client.completions.create(model=model, prompt="Hi", max_tokens=4, stream=True))
    assert chunks and all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_token_id_prompt_equals_text_prompt(client, model, tok):
    ids = tok.encode("The capital of France is")
    a = client.completions.create(model=model, prompt=ids, max_tokens=12)
    b = client.completions.create(model=model, prompt="The capital of France is", max_tokens=12)
    assert a.choices[0].text == b.choices[0].text and a.usage == b.usage


def test_echo_prepends_the_prompt(client, model, tok):
    prompt = "Echo me: naïve 🤖"
    plain = client.completions.create(model=model, prompt=prompt, max_tokens=8)
    echoed = client.completions.create(model=model, prompt=prompt, max_tokens=8, echo=True)
    assert echoed.choices[0].text == prompt + plain.choices[0].text
    text, _, _, _ = _stream_text(client.completions.create(model=model, prompt=prompt,
                                                           max_tokens=8, echo=True, stream=True))
    assert text == echoed.choices[0].text
    ids = client.completions.create(model=model, prompt=tok.encode(prompt), max_tokens=8,
                                    echo=True)
    assert ids.choices[0].text == echoed.choices[0].text


def _scripted(client, model, tok, key: str, **kw):
    n = len(script_ids(tok, key))
    whole = client.completions.create(model=model, prompt=key, max_tokens=n,
                                      extra_body={"ignore_eos": True}, **kw)
    text, finish, _, pieces = _stream_text(client.completions.create(
        model=model, prompt=key, max_tokens=n, stream=True, extra_body={"ignore_eos": True},
        **kw))
    return whole, text, finish, pieces


def test_split_emoji_decodes_the_same_both_ways(client, model, tok):
    ids = script_ids(tok, "emoji:")
    # the script really splits characters across tokens: some token alone is not valid UTF-8
    assert any("\ufffd" in tok.decode([i]) for i in ids)
    whole, text, finish, pieces = _scripted(client, model, tok, "emoji:")
    assert whole.choices[0].text == text == SCRIPTS["emoji:"]
    assert all("\ufffd" not in p for p in pieces) and len(pieces) > 3


def test_stop_string_split_across_tokens_never_leaks(client, model, tok):
    stop = "ma del"
    ids = script_ids(tok, "stop:")
    boundaries = [len(tok.decode(ids[:k])) for k in range(len(ids) + 1)]
    at = SCRIPTS["stop:"].index(stop)
    assert any(at < b < at + len(stop) for b in boundaries), "the stop must span tokens"
    whole, text, finish, pieces = _scripted(client, model, tok, "stop:", stop=[stop, "zzz"])
    want = SCRIPTS["stop:"][:at]
    assert whole.choices[0].text == text == want
    assert whole.choices[0].finish_reason == finish == "stop"
    assert not any(stop[:2] in p[len(want) - 2:] for p in pieces[-1:])
    assert "del" not in "".join(pieces)


def test_stop_string_in_the_engine_output(client, model, tok, ref):
    prompt = "Tell me a story."
    full, _ = ref.text(tok.encode(prompt), 40)
    stop = full[len(full) // 2: len(full) // 2 + 6]
    cut = full[:full.index(stop)]
    whole = client.completions.create(model=model, prompt=prompt, max_tokens=40, stop=stop)
    text, finish, usage, _ = _stream_text(client.completions.create(
        model=model, prompt=prompt, max_tokens=40, stop=stop, stream=True,
        stream_options={"include_usage": True}))
    assert whole.choices[0].text == text == cut
    assert whole.choices[0].finish_reason == finish == "stop"
    assert whole.usage.completion_tokens == usage.completion_tokens < 40


def test_stop_token_ids_end_the_completion(client, model, tok, ref):
    prompt = tok.encode("Stop ids")
    toks, _ = ref.tokens(prompt, 20)
    stop_id = toks[5]
    first = toks.index(stop_id)
    r = client.completions.create(model=model, prompt=prompt, max_tokens=20,
                                  extra_body={"stop_token_ids": [stop_id]})
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == first
    assert r.choices[0].text == tok.decode(toks[:first])


def test_models_lists_the_served_model(client, model):
    assert model == "fake-smollm2"
    assert client.models.retrieve(model).id == model
