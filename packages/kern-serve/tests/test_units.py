"""CPU units without a server: stop-string hold-back over every token split, the protocol's
framing, one BOS, and the request schemas."""

from __future__ import annotations

import pytest

from kern_run.tokenizer import TextTokenizer
from kern_serve import protocol as P
from kern_serve.prompts import adds_bos, encode_text
from kern_serve.textgen import TextStream

TEXTS = ["alpha beta gamma delta", "naïve café 🤖 日本語 done", "a\n\nb  c\tSTOP here",
         "1234567890 + 42 = ?", "emoji 👩‍🚀 and ✨ sparkle"]


def _reference(text: str, stops: list[str]) -> str:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return text[:min(hits)] if hits else text


@pytest.mark.parametrize("text", TEXTS)
def test_stop_strings_never_leak_and_cut_at_the_first_match(tok, text):
    ids = tok.tokenizer.encode(text, add_special_tokens=False).ids
    cases = [[]] + [[text[a:a + n]] for a in range(0, len(text) - 1, 3) for n in (1, 2, 5)
                    if text[a:a + n].strip()] + [["zz", text[-4:]], ["never there"]]
    for stops in cases:
        want = _reference(text, stops)
        ts = TextStream(tok, stops)
        pieces = [ts.push(i) for i in ids]
        pieces.append(ts.finish())
        got = "".join(pieces)
        assert got == want, (stops, pieces)
        assert all("\ufffd" not in p for p in pieces)
        for s in stops:                    # no released prefix of the text ever contains it
            acc = ""
            for p in pieces:
                acc += p
                assert s not in acc
        assert ts.stopped == (want != text)


def test_held_back_text_is_released_when_it_cannot_match(tok):
    ts = TextStream(tok, ["STOPX"])
    out = [ts.push(i) for i in tok.tokenizer.encode("go STOP go", add_special_tokens=False).ids]
    assert "".join(out) + ts.finish() == "go STOP go"
    assert not ts.stopped


def test_tokens_counted_until_the_stop(tok):
    ids = tok.tokenizer.encode("one two three four", add_special_tokens=False).ids
    ts = TextStream(tok, [" three"])
    for i in ids:
        ts.push(i)
    assert ts.stopped and ts.tokens == 3   # "one", " two", " three": the third completes it


def test_frames_round_trip_in_any_pieces():
    msgs = [P.Submit("a", [1, 2, 3], 5, [7], True), P.Abort("a"), P.Stop(),
            P.Steps([("a", 4, None, None), ("b", None, "stop", 2)], 0.001, 4),
            P.Refusal("c", "pool_too_small", "max_tokens", "too big")]
    data = b"".join(P.frame(m) for m in msgs)
    for cut in (1, 3, 7, len(data)):
        r = P.FrameReader()
        bodies = [b for i in range(0, len(data), cut) for b in r.feed(data[i:i + cut])]
        assert [P.decode_to_engine(b) if i < 3 else P.decode_from_engine(b)
                for i, b in enumerate(bodies)] == msgs


def test_a_corrupt_length_is_refused():
    with pytest.raises(ValueError):
        P.FrameReader().feed(b"\xff\xff\xff\xff")


@pytest.fixture(scope="module")
def bos_tok(tok):
    """The SmolLM2 tokenizer made to add a BOS (like Llama-3's) and a template that writes
    ``{{ bos_token }}`` itself: the double-BOS trap."""
    from tokenizers import Tokenizer, processors
    t = Tokenizer.from_str(tok.tokenizer.to_str())
    bos = tok.tokenizer.id_to_token(1)
    t.post_processor = processors.TemplateProcessing(single=f"{bos}:0 $A:0",
                                                     special_tokens=[(bos, 1)])
    template = ("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
                "{% endfor %}[assistant]")
    return TextTokenizer(t, frozenset({2}), 1, template, "test")


def test_one_bos(tok, bos_tok):
    from kern_serve.prompts import chat
    from kern_serve.schemas import ChatBody, Limits
    assert not adds_bos(tok) and adds_bos(bos_tok)
    assert bos_tok.encode("hi")[:1] == [1]                 # the tokenizer adds one …
    body = ChatBody(messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    ids = chat(body, bos_tok, Limits(vocab=49152, context=8192, max_tokens=8192)).prompt
    assert ids[0] == 1 and ids.count(1) == 1               # … the template wrote it: one
    assert encode_text(bos_tok, "plain")[:1] == [1] and encode_text(bos_tok, "plain").count(1) == 1
    assert 1 not in encode_text(tok, "plain")              # SmolLM2 adds none
    smol = chat(body, tok, Limits(vocab=49152, context=8192, max_tokens=8192)).prompt
    assert smol == tok.encode(tok.chat_prompt("hi"))       # = kern-run --chat's prompt
