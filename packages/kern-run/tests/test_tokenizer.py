"""The tokenizer built from GGUF metadata, against llama.cpp's own tokenizer of the same
file (llama-cpp-python, when installed) and on real text. The same checks against
transformers' GGUF conversion ran once on CPU (see the package README)."""

import json
from pathlib import Path

import pytest

from kern_run.defaults import gguf_path
from kern_run.errors import KernRunError
from kern_run.tokenizer import from_gguf_metadata, is_chatml, load_tokenizer, render_chat

try:
    GGUF = gguf_path()
except KernRunError as err:
    pytest.skip(str(err), allow_module_level=True)

REFERENCE = Path(__file__).parent / "reference" / "tokenizer_reference.json"
# The texts are the recorded reference's (reference/make_tokenizer_reference.py lists them).
TEXTS = [c["text"] for c in json.loads(REFERENCE.read_text())["cases"]]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(GGUF)


def test_metadata(tok):
    assert tok.vocab_size == 49152
    assert tok.eos_ids == {2} and tok.bos_id == 1
    assert tok.tokenizer.id_to_token(2) == "<|im_end|>"


def test_known_encoding(tok):
    assert tok.encode("The capital of France is") == [504, 3575, 282, 4649, 314]
    # digits one by one (tokenizer.ggml.pre = smollm), no BOS (add_bos_token false)
    assert tok.encode("12345") == [33, 34, 35, 36, 37]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text), skip_special=False) == text


def test_special_tokens_are_single_ids(tok):
    assert tok.encode("<|im_start|>") == [1]


@pytest.fixture(scope="module")
def llama():
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed: it is a source build of llama.cpp, kept out of the "
                                    "environment by the root pyproject's override-dependencies; "
                                    "`uv pip install llama-cpp-python` to compare tokenizers")
    llm = llama_cpp.Llama(model_path=str(GGUF), vocab_only=True, verbose=False)
    yield llm
    llm.close()


@pytest.mark.parametrize("text", TEXTS + [None])
def test_matches_llama_cpp(tok, llama, text):
    text = text if text is not None else tok.chat_prompt("What is the capital of France?")
    assert tok.encode(text) == llama.tokenize(text.encode(), add_bos=False, special=True)


def test_chat_prompt(tok):
    assert tok.chat_prompt("What is 2+2?") == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")


def test_chatml_rendering_equals_jinja(tok):
    pytest.importorskip("jinja2", reason="jinja2 not installed")
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    msgs = [{"role": "user", "content": "Hi there"}]
    ref = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
        tok.chat_template).render(messages=msgs, add_generation_prompt=True)
    assert is_chatml(tok.chat_template)
    assert render_chat(tok.chat_template, msgs) == ref
    sys_msgs = [{"role": "system", "content": "Be brief."}] + msgs
    ref = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
        tok.chat_template).render(messages=sys_msgs, add_generation_prompt=True)
    assert render_chat(tok.chat_template, sys_msgs) == ref


def test_streaming_detokenizer_holds_partial_characters(tok):
    text = "naïve 日本語 🤖 done"
    ids = tok.encode(text)
    s = tok.stream()
    pieces = [s.push(i) for i in ids] + [s.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)


def _meta(**over):
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
            "tokenizer.ggml.tokens": ["a", "b", "ab", "<eos>"],
            "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.token_type": [1, 1, 1, 3],
            "tokenizer.ggml.eos_token_id": 3}
    meta.update(over)
    return meta


def test_synthetic_metadata():
    t = from_gguf_metadata(_meta())
    assert t.encode("ab") == [2] and t.encode("ab<eos>") == [2, 3] and t.eos_ids == {3}


def test_bos_added_when_the_metadata_says_so():
    t = from_gguf_metadata(_meta(**{"tokenizer.ggml.bos_token_id": 0,
                                    "tokenizer.ggml.add_bos_token": True}))
    assert t.encode("b") == [0, 1]


@pytest.mark.parametrize("over,msg", [
    ({"tokenizer.ggml.pre": "mystery"}, "tokenizer.ggml.pre `mystery` is not known"),
    ({"tokenizer.ggml.model": "llama"}, "tokenizer.ggml.model `llama` is not supported"),
    ({"tokenizer.ggml.eos_token_id": None}, "no EOS token"),
    ({"tokenizer.ggml.merges": ["ab"]}, "merge `ab`"),
])
def test_metadata_problems_are_named(over, msg):
    with pytest.raises(KernRunError, match=msg):
        from_gguf_metadata(_meta(**over))


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(KernRunError, match="no such file"):
        load_tokenizer(tmp_path / "nope.gguf")
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(KernRunError, match="not a tokenizer.json"):
        load_tokenizer(bad)
    with pytest.raises(KernRunError, match="no tokenizer.json"):
        load_tokenizer(tmp_path / "x" if (tmp_path / "x").mkdir() is None else tmp_path)


def test_tokenizer_json_with_generation_config(tmp_path, tok):
    tok.tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [2, 0]}')
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}", "bos_token": "<|im_start|>"}')
    t = load_tokenizer(tmp_path)
    assert t.eos_ids == {0, 2} and t.bos_id == 1 and t.chat_template == "{{ messages }}"
    assert t.encode("The capital of France is") == [504, 3575, 282, 4649, 314]


def _reference():
    return json.loads(REFERENCE.read_text())


@pytest.mark.parametrize("case", range(len(_reference()["cases"])))
def test_matches_transformers_recorded(tok, case):
    """Ids equal transformers' own GGUF tokenizer (recorded by
    reference/make_tokenizer_reference.py, since CI has no transformers)."""
    ref = _reference()["cases"][case]
    assert tok.encode(ref["text"]) == ref["ids"]


def test_chat_matches_transformers_recorded(tok):
    ref = _reference()["chat"]
    assert tok.chat_prompt(ref["user"]) == ref["prompt"]
    assert tok.encode(ref["prompt"]) == ref["ids"]
