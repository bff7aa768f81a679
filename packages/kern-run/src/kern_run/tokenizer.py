"""The tokenizer from the model's own data: a GGUF's metadata, or ``tokenizer.json`` (with
``tokenizer_config.json`` / ``generation_config.json`` beside it), always encoded by
``tokenizers``.

From a GGUF (``tokenizer.ggml.model`` = ``gpt2``, the byte-level BPE of Llama-3, Qwen2/3,
SmolLM, GPT-2): vocabulary ``tokens``, ``merges``, ``token_type`` (3 = control → special
added token, 4 = user-defined → added token), ``bos``/``eos`` ids (plus ``eot``/``eom`` as
further stop tokens), ``add_bos_token``/``add_eos_token``, and the pre-tokenizer named by
``tokenizer.ggml.pre`` — llama.cpp's name for the split regex, mapped to the pre-tokenizer the
model's own ``tokenizer.json`` uses:

| ``tokenizer.ggml.pre`` | pre-tokenizer |
|---|---|
| ``gpt-2``, ``gpt2`` | ByteLevel with the GPT-2 regex |
| ``smollm``, ``starcoder``, ``refact``, ``codeshell``, ``command-r`` | every digit alone, then ByteLevel (GPT-2 regex) |
| ``llama3``, ``llama-v3``, ``llama-bpe`` | the Llama-3 regex (digits in runs of ≤ 3), ByteLevel; merges ignored for whole-word vocabulary hits; BOS added by default |
| ``qwen2``, ``deepseek-r1-qwen`` | the Qwen2 regex (every digit alone), ByteLevel; NFC normalization |

Any other value is refused with its name (pass ``--tokenizer tokenizer.json`` instead).

Chat (``--chat``): the model's ``chat_template`` rendered for one user message with the
generation prompt. Templates in the ChatML form (``<|im_start|>role\\ncontent<|im_end|>\\n``:
SmolLM2, Qwen2/3) are rendered without jinja, including a default system message written
literally in the template (SmolLM2's). Other templates need ``jinja2`` (used when installed).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors

from .errors import KernRunError

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

#: tokenizer.ggml.pre -> family
PRE_FAMILIES = {
    "gpt-2": "gpt2", "gpt2": "gpt2",
    "smollm": "digits", "starcoder": "digits", "refact": "digits", "codeshell": "digits",
    "command-r": "digits",
    "llama3": "llama3", "llama-v3": "llama3", "llama-bpe": "llama3",
    "qwen2": "qwen2", "deepseek-r1-qwen": "qwen2",
}

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 2, 3, 4


@dataclass
class TextTokenizer:
    """A ``tokenizers.Tokenizer`` with what generation needs from the model's data."""

    tokenizer: Tokenizer
    eos_ids: frozenset[int]
    bos_id: int | None = None
    chat_template: str | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special)

    def chat_prompt(self, message: str) -> str:
        """The prompt text for one user ``message`` in the model's chat format."""
        if not self.chat_template:
            raise KernRunError(f"--chat: the tokenizer data ({self.source}) carries no chat "
                               f"template")
        return render_chat(self.chat_template, [{"role": "user", "content": message}],
                           bos=self._token(self.bos_id))

    def _token(self, i: int | None) -> str:
        return "" if i is None else (self.tokenizer.id_to_token(i) or "")

    def stream(self) -> "Detokenizer":
        return Detokenizer(self)


class Detokenizer:
    """Incremental decoding for streaming: :meth:`push` returns the text a new token
    completes (byte-level tokens may end inside a UTF-8 character: that text waits)."""

    def __init__(self, tok: TextTokenizer) -> None:
        self.tok = tok
        self.ids: list[int] = []
        self.prefix = 0   # start of the window decoded for context
        self.read = 0     # end of what was already emitted

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        before = self.tok.decode(self.ids[self.prefix:self.read])
        now = self.tok.decode(self.ids[self.prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return now[len(before):]
        return ""

    def flush(self) -> str:
        before = self.tok.decode(self.ids[self.prefix:self.read])
        now = self.tok.decode(self.ids[self.prefix:])
        self.prefix = self.read = len(self.ids)
        return now[len(before):]


# -- loading --------------------------------------------------------------------------------
def load_tokenizer(path: str | os.PathLike) -> TextTokenizer:
    """The tokenizer of ``path``: a ``.gguf`` file, a ``tokenizer.json``, or a directory
    holding ``tokenizer.json``."""
    p = Path(path)
    if p.is_dir():
        if (p / "tokenizer.json").is_file():
            return from_tokenizer_json(p / "tokenizer.json")
        ggufs = sorted(p.glob("*.gguf"))
        if len(ggufs) == 1:
            return from_gguf(ggufs[0])
        raise KernRunError(f"--tokenizer `{p}`: the directory holds no tokenizer.json "
                           f"(nor exactly one .gguf file)")
    if not p.is_file():
        raise KernRunError(f"--tokenizer `{p}`: no such file")
    if p.suffix == ".gguf":
        return from_gguf(p)
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return from_gguf(p)
    return from_tokenizer_json(p)


def from_gguf(path: str | os.PathLike) -> TextTokenizer:
    from kern_weights.errors import GGUFError
    from kern_weights.gguf import read_metadata
    try:
        meta = read_metadata(path)
    except GGUFError as err:
        raise KernRunError(str(err)) from None
    return from_gguf_metadata(meta, where=f"GGUF `{path}`")


def _get(meta: dict[str, Any], key: str, where: str) -> Any:
    if key not in meta:
        raise KernRunError(f"{where}: metadata has no `{key}`; it cannot give a tokenizer")
    return meta[key]


def from_gguf_metadata(meta: dict[str, Any], where: str = "GGUF") -> TextTokenizer:
    """Build the tokenizer from GGUF metadata (see the module docstring)."""
    model = _get(meta, "tokenizer.ggml.model", where)
    if model != "gpt2":
        raise KernRunError(f"{where}: tokenizer.ggml.model `{model}` is not supported (only "
                           f"`gpt2`, byte-level BPE); pass --tokenizer tokenizer.json")
    pre = meta.get("tokenizer.ggml.pre", "gpt-2")
    family = PRE_FAMILIES.get(pre)
    if family is None:
        raise KernRunError(f"{where}: tokenizer.ggml.pre `{pre}` is not known to kern-run "
                           f"(known: {', '.join(sorted(PRE_FAMILIES))}); pass "
                           f"--tokenizer tokenizer.json")
    tokens: list[str] = list(_get(meta, "tokenizer.ggml.tokens", where))
    merges_raw: list[str] = list(_get(meta, "tokenizer.ggml.merges", where))
    types: list[int] = list(meta.get("tokenizer.ggml.token_type", [TOKEN_NORMAL] * len(tokens)))
    if len(types) != len(tokens):
        raise KernRunError(f"{where}: {len(types)} token types for {len(tokens)} tokens")
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for m in merges_raw:
        a, sep, b = m.partition(" ")
        if not sep:
            raise KernRunError(f"{where}: merge `{m}` is not two tokens separated by a space")
        merges.append((a, b))
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unk_id] if isinstance(unk_id, int) and 0 <= unk_id < len(tokens) \
        and types[unk_id] == TOKEN_UNKNOWN else None
    bpe = models.BPE(vocab, merges, unk_token=unk, fuse_unk=False, byte_fallback=False,
                     ignore_merges=(family == "llama3"))
    tk = Tokenizer(bpe)
    if family == "qwen2":
        tk.normalizer = normalizers.NFC()
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=family in ("gpt2", "digits"))
    if family == "digits":
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl])
    elif family in ("llama3", "qwen2"):
        rx = LLAMA3_REGEX if family == "llama3" else QWEN2_REGEX
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(rx), behavior="isolated", invert=False), bl])
    else:
        tk.pre_tokenizer = bl
    tk.decoder = decoders.ByteLevel()
    added = [AddedToken(t, special=(ty == TOKEN_CONTROL), normalized=False)
             for t, ty in zip(tokens, types) if ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED)]
    if added:
        tk.add_tokens(added)

    def tid(key: str) -> int | None:
        v = meta.get(key)
        return int(v) if isinstance(v, int) and 0 <= v < len(tokens) else None

    bos, eos = tid("tokenizer.ggml.bos_token_id"), tid("tokenizer.ggml.eos_token_id")
    stops = {i for i in (eos, tid("tokenizer.ggml.eot_token_id"),
                         tid("tokenizer.ggml.eom_token_id")) if i is not None}
    if not stops:
        raise KernRunError(f"{where}: metadata names no EOS token "
                           f"(tokenizer.ggml.eos_token_id)")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", family == "llama3"))
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))
    _post_processor(tk, tokens, bos if add_bos else None, eos if add_eos else None, where)
    return TextTokenizer(tk, frozenset(stops), bos, meta.get("tokenizer.chat_template"),
                         source=where)


def _post_processor(tk: Tokenizer, tokens: Sequence[str], bos: int | None, eos: int | None,
                    where: str) -> None:
    if bos is None and eos is None:
        return
    single, pair, special = "$A:0", "$A:0 $B:1", []
    if bos is not None:
        single, pair = f"{tokens[bos]}:0 {single}", f"{tokens[bos]}:0 $A:0 {tokens[bos]}:1 $B:1"
        special.append((tokens[bos], bos))
    if eos is not None:
        single, pair = f"{single} {tokens[eos]}:0", f"{pair} {tokens[eos]}:1"
        if eos != bos:
            special.append((tokens[eos], eos))
    tk.post_processor = processors.TemplateProcessing(single=single, pair=pair,
                                                      special_tokens=special)


def from_tokenizer_json(path: str | os.PathLike) -> TextTokenizer:
    """``tokenizer.json``, with EOS and the chat template from the files beside it
    (``generation_config.json`` first, then ``tokenizer_config.json``, ``config.json``)."""
    p = Path(path)
    try:
        tk = Tokenizer.from_file(str(p))
    except Exception as err:  # tokenizers raises plain Exceptions
        raise KernRunError(f"--tokenizer `{p}`: not a tokenizer.json ({err})") from None
    d = p.parent
    gen, tcfg, cfg = (_json(d / n) for n in ("generation_config.json",
                                              "tokenizer_config.json", "config.json"))

    def ids(v: Any) -> list[int]:
        if isinstance(v, int):
            return [v]
        if isinstance(v, list):
            return [x for x in v if isinstance(x, int)]
        return []

    def token_id(v: Any) -> list[int]:
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            i = tk.token_to_id(v)
            return [] if i is None else [i]
        return []

    eos = ids(gen.get("eos_token_id")) or token_id(tcfg.get("eos_token")) \
        or ids(cfg.get("eos_token_id"))
    if not eos:
        raise KernRunError(f"--tokenizer `{p}`: no EOS token found in generation_config.json, "
                           f"tokenizer_config.json or config.json beside it")
    bos = (ids(gen.get("bos_token_id")) or token_id(tcfg.get("bos_token"))
           or ids(cfg.get("bos_token_id")) or [None])[0]
    template = tcfg.get("chat_template")
    if isinstance(template, list):  # named templates: take "default"
        template = next((t.get("template") for t in template if t.get("name") == "default"),
                        None)
    jinja = d / "chat_template.jinja"
    if template is None and jinja.is_file():
        template = jinja.read_text()
    return TextTokenizer(tk, frozenset(eos), bos, template, source=f"`{p}`")


def _json(p: Path) -> dict[str, Any]:
    if not p.is_file():
        return {}
    try:
        v = json.loads(p.read_text())
    except (OSError, ValueError) as err:
        raise KernRunError(f"`{p}`: cannot read JSON: {err}") from None
    return v if isinstance(v, dict) else {}


# -- chat -----------------------------------------------------------------------------------
_CHATML_SYSTEM = re.compile(r"<\|im_start\|>system\n([^{}'\"]*?)<\|im_end\|>")


def is_chatml(template: str) -> bool:
    return "<|im_start|>" in template and "<|im_end|>" in template


def render_chat(template: str, messages: Iterable[dict[str, str]], *, bos: str = "") -> str:
    """``messages`` in the template's format, ending with the assistant's generation prompt.

    ChatML templates are rendered directly: the default system message, when the template
    writes one literally (SmolLM2: "You are a helpful AI assistant named SmolLM, …"), comes
    first unless the messages start with a system message; then
    ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message and ``<|im_start|>assistant\\n``.
    Anything else is rendered with jinja2 when it is installed."""
    msgs = list(messages)
    if is_chatml(template):
        out = []
        m = _CHATML_SYSTEM.search(template)
        if m and (not msgs or msgs[0]["role"] != "system"):
            out.append(f"<|im_start|>system\n{m.group(1)}<|im_end|>\n")
        for msg in msgs:
            out.append(f"<|im_start|>{msg['role']}\n{msg['content']}<|im_end|>\n")
        out.append("<|im_start|>assistant\n")
        return "".join(out)
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise KernRunError("--chat: the model's chat template is not ChatML; rendering it "
                           "needs jinja2 (pip install jinja2)") from None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg: str) -> None:
        raise jinja2.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=msgs, add_generation_prompt=True,
                                                bos_token=bos, eos_token="")
    except jinja2.TemplateError as err:
        raise KernRunError(f"--chat: the model's chat template failed: {err}") from None
