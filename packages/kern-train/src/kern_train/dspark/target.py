"""The target model (an HF ``LlamaForCausalLM`` / ``Qwen3ForCausalLM``) as the trainer sees it:
loading, its geometry, and one no-grad forward giving the 5 tap hidden states and the final
(normed) hidden state whose ``lm_head`` rows are the target logits.

Targets: ``gguf:PATH`` (a GGUF file, dequantised by transformers, as the captures load SmolLM2),
an HF checkpoint folder, or ``tiny`` — a seeded random 8-layer Llama with a character-level
tokenizer (CPU tests and the device script's dry run; no download).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .config import DSparkError, Geometry, geometry_from_hf

#: The tiny target's characters: printable ASCII and newline; ids 0..5 are its specials.
TINY_SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>", "<mask>", "<|endoftext|>"]
TINY_CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@dataclass
class Target:
    model: Any          # the HF causal LM, eval mode
    tokenizer: Any      # an HF tokenizer with a chat template
    name: str           # the model id written to dspark.json `target`
    geometry: Geometry

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def embed_and_head(self) -> tuple[Tensor, Tensor]:
        """The target's embedding and lm_head weights [V, d] (the same tensor when tied)."""
        return (self.model.get_input_embeddings().weight,
                self.model.get_output_embeddings().weight)

    @torch.no_grad()
    def taps(self, tokens: Tensor, tap_layers: tuple[int, ...]) -> tuple[Tensor, Tensor]:
        """(taps [S, T, 5d], last [S, T, d]) for right-padded ``tokens`` [S, T]: tap i is the
        residual stream after layer ``tap_layers[i]`` (``hidden_states[id + 1]``); ``last``
        is the final normed hidden state (``lm_head(last)`` = the target logits). Causal
        attention: padding at the end never changes a real position."""
        out = self.model.model(input_ids=tokens, output_hidden_states=True, use_cache=False)
        hs = out.hidden_states
        return torch.cat([hs[i + 1] for i in tap_layers], dim=-1), out.last_hidden_state

    @torch.no_grad()
    def logits(self, last: Tensor) -> Tensor:
        return self.model.lm_head(last).float()


def tiny_tokenizer() -> Any:
    """A character-level HF tokenizer with ChatML specials and a chat template."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {t: i for i, t in enumerate(TINY_SPECIALS + chars)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(".|\\n"), behavior="isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>",
                                  eos_token="<|im_end|>", additional_special_tokens=TINY_SPECIALS)
    tok.chat_template = TINY_CHAT
    return tok


def tiny_model(vocab: int, seed: int) -> Any:
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=8, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
                                   max_position_embeddings=2048, tie_word_embeddings=True,
                                   bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # a sharper random model than the default init: greedy text varies
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.normal_(0.0, 0.15)
    return model


def _gguf_chat_template(path: Path) -> str | None:
    """The GGUF's own ``tokenizer.chat_template`` (when transformers' GGUF tokenizer drops
    it)."""
    from kern_weights.gguf import read_metadata

    t = read_metadata(path).get("tokenizer.chat_template")
    return t if isinstance(t, str) else None


def load_target(spec: str, device: str, dtype: torch.dtype = torch.bfloat16,
                seed: int = 0) -> Target:
    """``spec``: ``gguf:PATH`` | an HF folder | ``tiny``."""
    import transformers

    if spec == "tiny":
        tok = tiny_tokenizer()
        model = tiny_model(len(tok), seed).to(device=device, dtype=dtype)
        name = "kern-train/tiny-random-llama"
    else:
        kw: dict[str, Any] = {}
        path = Path(spec[5:] if spec.startswith("gguf:") else spec)
        if spec.startswith("gguf:"):
            kw["gguf_file"] = path.name
            path = path.parent
        if not path.exists():
            raise DSparkError(f"--target {spec}: no such file or folder")
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, **kw)
            tok = transformers.AutoTokenizer.from_pretrained(str(path), **kw)
        except (OSError, ValueError) as e:
            raise DSparkError(f"--target {spec}: cannot load: {e}") from None
        model = model.to(device)
        name = getattr(model.config, "name_or_path", "") or path.name
    if not getattr(tok, "chat_template", None) and spec.startswith("gguf:"):
        tok.chat_template = _gguf_chat_template(Path(spec[5:]))
    if not getattr(tok, "chat_template", None):
        raise DSparkError(f"--target {spec}: its tokenizer carries no chat template")
    model.eval().requires_grad_(False)
    g = geometry_from_hf(model.config.to_dict(), f"--target {spec} config")
    return Target(model=model, tokenizer=tok, name=name, geometry=g)
