"""``kern-run bench --random-weights``: the SmolLM2 case with seeded random weights of
SmolLM2-135M's shape instead of the GGUF's, so its speed rows (decode, levers, ablation,
profile, the compiled-transformers baseline) need no GGUF.

Why: the GGUF is 98 MB and the GPU machine takes 64 MiB a call, so a SmolLM2 measurement
used to cost three extra calls to carry it in parts. A decode step's time does not depend on
the weights' values (the same kernels stream the same bytes; only the sampled token differs),
so speed rows are as valid with random weights. Text, ``--spec`` (its prompt sets need the
real model's predictions) and accuracy checks do need the GGUF.

The random checkpoint is made by transformers in a child process (:mod:`.torch_side`), like
the Qwen3-4B case's, and exported into the bundled example's names with kern-weights; both
are cached in ``$KERN_CACHE/smollm2-135m-random/``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

#: SmolLM2-135M's transformers config (the GGUF's shape: hidden 576, 30 layers, 9 / 3 heads,
#: head_dim 64, vocab 49152; ../shared/facts/h200.md, and the capture's provider sidecar,
#: which a test compares field by field).
SMOLLM2_135M = dict(model_type="llama", hidden_size=576, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                    intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True,
                    rms_norm_eps=1e-5, rope_theta=100_000.0, max_position_embeddings=8192)


@dataclass(frozen=True)
class RandomBundle:
    """A :class:`..defaults.Bundle` look-alike for the bench: the example's manifest and
    kernels, the exported random weights; no tokenizer (nothing here has text). ``config``
    is what the baseline builds its (equally random) transformers model from."""

    manifest: Path
    kernels: Path
    weights: list[Path]
    plan: Path | None
    hf: Path
    config: dict = field(default_factory=lambda: dict(SMOLLM2_135M))
    tokenizer: None = None


def random_smollm2() -> RandomBundle:
    """The bundled SmolLM2 example with seeded random weights (made and exported on first
    use; the export's file name carries the manifest's weight declarations and plan, so a
    regenerated example with other weights never reads a stale export)."""
    from ..defaults import cache_dir, example_files, weights_key
    from . import export_weights
    from .torch_side import checkpoint_in_child

    manifest, kernels, plan = example_files()
    base = cache_dir() / "smollm2-135m-random"
    hf = checkpoint_in_child(base / "hf", SMOLLM2_135M)
    key = weights_key(manifest, plan, hf / "config.json")
    w = export_weights(manifest, plan, hf, base / f"weights-{key}.safetensors")
    return RandomBundle(manifest, kernels, [w], plan, hf)
