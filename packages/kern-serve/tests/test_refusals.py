"""Every refusal of issue 21's list: OpenAI's error object, its status and ``param``; never
a bare 422 or a traceback. Also what is ignored (``user``, ``seed``, ``top_p`` at
temperature 0) and that greedy sampling spelled ``temperature > 0, top_k = 1`` is accepted."""

from __future__ import annotations

import httpx
import openai
import pytest

MSG = [{"role": "user", "content": "Hi"}]
C, CH = "/v1/completions", "/v1/chat/completions"

#: (id, endpoint, body, status, param, code or None: any)
CASES = [
    ("malformed-json", C, b'{"prompt": "x",', 400, None, "invalid_json"),
    ("not-an-object", C, b'[1, 2]', 400, None, "invalid_json"),
    ("empty-prompt", C, {"prompt": ""}, 400, "prompt", "empty_prompt"),
    ("empty-id-prompt", C, {"prompt": []}, 400, "prompt", None),
    ("id-outside-vocab", C, {"prompt": [1, 2, 49152]}, 400, "prompt", "invalid_token"),
    ("negative-id", C, {"prompt": [-1]}, 400, "prompt", "invalid_token"),
    ("two-prompts", C, {"prompt": ["a", "b"]}, 400, "prompt", None),
    ("max-tokens-0", C, {"prompt": "x", "max_tokens": 0}, 400, "max_tokens", None),
    ("max-tokens-str", C, {"prompt": "x", "max_tokens": "many"}, 400, "max_tokens", None),
    ("context", C, {"prompt": "x", "max_tokens": 9000}, 400, "max_tokens",
     "context_length_exceeded"),
    ("prompt-context", C, {"prompt": [5] * 8192, "max_tokens": 1}, 400, "prompt",
     "context_length_exceeded"),
    ("chat-context", CH, {"messages": MSG, "max_tokens": 9000}, 400, "max_tokens",
     "context_length_exceeded"),
    ("chat-completion-tokens", CH, {"messages": MSG, "max_completion_tokens": 9000}, 400,
     "max_completion_tokens", "context_length_exceeded"),
    ("n-2", C, {"prompt": "x", "n": 2}, 400, "n", None),
    ("best-of", C, {"prompt": "x", "best_of": 3}, 400, "best_of", None),
    ("temperature", C, {"prompt": "x", "temperature": 0.8}, 400, "temperature", None),
    ("chat-temperature", CH, {"messages": MSG, "temperature": 1.0}, 400, "temperature", None),
    ("top-k-2", C, {"prompt": "x", "temperature": 0.8, "top_k": 2}, 400, "temperature", None),
    ("presence", C, {"prompt": "x", "presence_penalty": 0.5}, 400, "presence_penalty", None),
    ("frequency", CH, {"messages": MSG, "frequency_penalty": 1}, 400, "frequency_penalty",
     None),
    ("repetition", C, {"prompt": "x", "repetition_penalty": 1.2}, 400, "repetition_penalty",
     None),
    ("logit-bias", C, {"prompt": "x", "logit_bias": {"5": 10}}, 400, "logit_bias", None),
    ("logprobs", C, {"prompt": "x", "logprobs": 2}, 400, "logprobs", None),
    ("chat-logprobs", CH, {"messages": MSG, "logprobs": True}, 400, "logprobs", None),
    ("top-logprobs", CH, {"messages": MSG, "top_logprobs": 2}, 400, "top_logprobs", None),
    ("tools", CH, {"messages": MSG, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {}}}]}, 400, "tools", None),
    ("tool-choice", CH, {"messages": MSG, "tool_choice": "auto"}, 400, "tool_choice", None),
    ("tool-message", CH, {"messages": MSG + [{"role": "tool", "content": "x",
                                              "tool_call_id": "1"}]}, 400,
     "messages[1].role", None),
    ("response-format", CH, {"messages": MSG, "response_format": {"type": "json_object"}},
     400, "response_format", None),
    ("suffix", C, {"prompt": "x", "suffix": "end"}, 400, "suffix", None),
    ("image", CH, {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, 400,
     "messages[0].content[1]", None),
    ("bad-role", CH, {"messages": [{"role": "wizard", "content": "x"}]}, 400,
     "messages[0].role", None),
    ("no-messages", CH, {"messages": []}, 400, "messages", None),
    ("missing-messages", CH, {"model": "fake-smollm2"}, 400, "messages", None),
    ("stream-options-alone", C, {"prompt": "x", "stream_options": {"include_usage": True}},
     400, "stream_options", None),
    ("five-stops", C, {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop", None),
    ("empty-stop", C, {"prompt": "x", "stop": [""]}, 400, "stop", None),
    ("stop-id-outside", C, {"prompt": "x", "stop_token_ids": [10**6]}, 400,
     "stop_token_ids", None),
    ("unknown-param", C, {"prompt": "x", "mirostat": 2}, 400, "mirostat",
     "unsupported_parameter"),
    ("unknown-model", C, {"prompt": "x", "model": "gpt-9"}, 404, "model", "model_not_found"),
]


def _post(server, path: str, body, key: str | None = None) -> httpx.Response:
    auth = {"authorization": f"Bearer {key}"} if key else {}
    if isinstance(body, bytes):
        return httpx.post(server.url + path, content=body, timeout=10,
                          headers={"content-type": "application/json", **auth})
    return httpx.post(server.url + path, json=body, timeout=10, headers=auth)


def _check(r: httpx.Response, status: int, param, code) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    assert err["message"] and "Traceback" not in err["message"] and "\n" not in err["message"]
    return err


@pytest.mark.parametrize("path,body,status,param,code", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_refusal(server, path, body, status, param, code):
    _check(_post(server, path, body), status, param, code)


@pytest.mark.parametrize("stream", [False, True])
def test_refusals_reach_the_openai_client(client, model, stream):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt="x", max_tokens=9000, stream=stream)
    assert e.value.status_code == 400 and e.value.code == "context_length_exceeded"
    assert e.value.param == "max_tokens"
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=MSG, stream=stream)
    assert e.value.param == "model"


def test_pool_refusal_from_the_engine(small_pool_server):
    # fits the model (8192) but never the 16 usable pages (256 slots) of this pool
    r = _post(small_pool_server, C, {"prompt": "x", "max_tokens": 300}, "sk-test")
    err = _check(r, 400, "max_tokens", "pool_too_small")
    assert "pool" in err["message"]
    r = _post(small_pool_server, C, {"prompt": "x", "max_tokens": 300, "stream": True},
              "sk-test")
    _check(r, 400, "max_tokens", "pool_too_small")


def test_oversized_body_is_413(server):
    r = _post(server, C, b'{"prompt": "' + b"a" * (5 << 20) + b'"}')
    _check(r, 413, None, "request_too_large")


def test_unknown_route_and_method(server):
    _check(httpx.get(server.url + "/v1/nothing"), 404, None, "not_found")
    _check(httpx.get(server.url + C), 405, None, None)


@pytest.mark.parametrize("extra", [{"user": "u-1"}, {"seed": 7}, {"top_p": 0.3},
                                   {"temperature": 0}, {"temperature": 0.7, "top_k": 1},
                                   {"top_k": 40}, {"presence_penalty": 0, "n": 1}])
def test_ignored_or_greedy_parameters_are_accepted(server, extra):
    base = _post(server, C, {"prompt": "Same text", "max_tokens": 6}).json()
    r = _post(server, C, {"prompt": "Same text", "max_tokens": 6, **extra})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == base["choices"][0]["text"]


@pytest.mark.parametrize("key", [None, "sk-wrong", ""])
def test_api_key_required(small_pool_server, key):
    for path, body in ((C, {"prompt": "x", "max_tokens": 2}), (CH, {"messages": MSG})):
        _check(_post(small_pool_server, path, body, key), 401, None, "invalid_api_key")
    auth = {"authorization": f"Bearer {key}"} if key else {}
    _check(httpx.get(small_pool_server.url + "/v1/models", headers=auth), 401, None,
           "invalid_api_key")
    # health and metrics stay open (probes and scrapers carry no key)
    assert httpx.get(small_pool_server.url + "/health").status_code == 200
    assert httpx.get(small_pool_server.url + "/metrics").status_code == 200


def test_api_key_accepted_by_the_openai_client(small_pool_server):
    c = openai.OpenAI(base_url=small_pool_server.url + "/v1", api_key="sk-test", max_retries=0)
    assert [m.id for m in c.models.list().data] == ["kern-test"]
    r = c.completions.create(model="kern-test", prompt="Hi", max_tokens=3)
    assert r.usage.completion_tokens == 3
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=small_pool_server.url + "/v1", api_key="sk-no",
                      max_retries=0).models.list()
