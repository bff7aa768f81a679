"""The peer of ``kern-run bench --spec``: transformers' own prompt-lookup decoding
(``generate(prompt_lookup_num_tokens=…)``) next to its plain greedy ``generate`` on the same
token ids, the same GGUF weights (bf16) and the same GPU. Runs in the bench's torch child
(:mod:`.torch_side`, op ``lookup``); torch is imported only here."""

from __future__ import annotations

import time
from pathlib import Path


def lookup_peer(gguf: Path, sets: dict[str, list[list[int]]], *, steps: int, gpu: int,
                num_tokens: int = 10) -> dict:
    """Per set: total ms/token of plain greedy and of prompt lookup (``num_tokens`` drafts),
    ``steps`` new tokens each with EOS disabled, after one warm-up of each; and how many
    outputs equal plain greedy's."""
    import torch
    from transformers import AutoModelForCausalLM

    dev = torch.device("cuda", gpu)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=torch.bfloat16).to(dev).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0

    def gen(ids: list[int], lookup: bool) -> tuple[list[int], float]:
        x = torch.tensor([ids], device=dev)
        kw = dict(max_new_tokens=steps, do_sample=False, min_new_tokens=steps)
        if lookup:
            kw["prompt_lookup_num_tokens"] = num_tokens
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        with torch.no_grad():
            y = model.generate(x, attention_mask=torch.ones_like(x), **kw)
        torch.cuda.synchronize(dev)
        return y[0, len(ids):].tolist(), time.perf_counter() - t0

    warm = next(iter(sets.values()))[0]
    gen(warm, False)
    gen(warm, True)
    out = {}
    for name, prompts in sets.items():
        ps = ls = 0.0
        n = same = 0
        for ids in prompts:
            a, ta = gen(ids, False)
            b, tb = gen(ids, True)
            ps, ls, n = ps + ta, ls + tb, n + len(a)
            same += a == b
        out[name] = {"plain_ms_per_token": 1000 * ps / n, "lookup_ms_per_token": 1000 * ls / n,
                     "speedup": ps / ls, "identical": same, "prompts": len(prompts),
                     "num_tokens": num_tokens}
    return out
