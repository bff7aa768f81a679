"""kern-train tests (CPU, float32): the helpers in ``ktrain_helpers.py``, and the tiny random
HF Llama target (``load_target("tiny")``) once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tiny_target():
    from kern_train.dspark.target import load_target
    return load_target("tiny", "cpu", torch.float32, seed=0)
