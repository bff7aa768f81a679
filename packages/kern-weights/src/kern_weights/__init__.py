"""kern-weights, the exporter of ``kern-gen export``: weights from a Hugging Face safetensors
checkpoint or a GGUF file, into the names, dtypes and shapes a kern manifest declares, as one
safetensors file.

Pieces (each a small module):

- :mod:`.sources` — weight sources yielding HF-named tensors lazily (:class:`HFSource`);
  :mod:`.gguf_source` and :mod:`.gguf_map` — GGUF files (dequantized, names mapped,
  llama.cpp's q/k row permutation undone);
- :mod:`.export_plan` — which source tensors make each manifest weight (identity by default;
  concatenations, tied embeddings, derived tensors);
- :mod:`.derived` — computed tensors (``rope_cos_sin``);
- :mod:`.arrays` — numpy-only conversions (bf16 round-to-nearest-even);
- :mod:`.writer` — the streaming safetensors writer;
- :mod:`.export` — resolution (all checks before writing), the export loop and
  ``export_files`` (the same from paths); its function ``export`` shadows the module here:
  ``from kern_weights.export import …`` for the rest;
- :mod:`.gguf` — GGUF metadata, read without the ``gguf`` package (kern-run's tokenizer).
"""

from .arrays import Array, bf16_to_f32, convert, f32_to_bf16
from .errors import ExportError
from .export import (Progress, Recipe, Summary, export, export_files, make_recipes, read_manifest,
                     weight_slots)
from .export_plan import Plan
from .sources import HFSource, Source, TensorInfo, open_source
from .writer import SafetensorsWriter, Slot

__all__ = [
    "Array", "ExportError", "HFSource", "Plan", "Progress", "Recipe", "SafetensorsWriter",
    "Slot", "Source", "Summary", "TensorInfo", "bf16_to_f32", "convert", "export",
    "export_files", "f32_to_bf16", "make_recipes", "open_source", "read_manifest",
    "weight_slots",
]
