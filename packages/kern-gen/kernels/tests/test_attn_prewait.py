"""The cluster attention's reads before its grid-dependency wait in the machine code (CPU,
needs nvcc): the rope variants request kv_lens[t] and the first key batch — kUnroll = 4 keys
a key group, each a page-table entry, a K row and a V row — and nothing else (until session
27 ptxas also hoisted the row's slot, an ``.nc`` input load, above the wait; with the
trigger right after the wait it stays below) (attn_decode_cluster.cu; the lever
KERN_ATTN_PREWAIT of session 24, the code since session 25); the variant without the rope
waits first.  kern_gen.llama.pdl_order proves the launch order these early reads need."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402

ROPE = [f"kern_attn_decode_cluster_rope{n}_bf16_d{d}" for n in ("", "_norm") for d in (64, 128)]
PLAIN = [f"kern_attn_decode_cluster_bf16_d{d}" for d in (64, 128)]
EARLY = 1 + 4 * 3     # kv_lens[t], 4 x (table entry, K, V)


@pytest.fixture(scope="module")
def cubin():
    return _own_kernels_gpu.cubin_bytes("attn_decode_cluster.cu")


def test_the_rope_variants_read_the_first_key_batch_before_the_wait(cubin):
    for sym in ROPE:
        f = sass.pdl_facts(cubin, sym)
        assert f.wait is not None and not f.waits_first and f.triggers_after_wait, sym
        assert sass.accesses_before_wait(cubin, sym) == EARLY, sym


def test_the_plain_variants_wait_first(cubin):
    for sym in PLAIN:
        assert sass.pdl_facts(cubin, sym).waits_first, sym


def test_every_variant_lets_its_dependents_launch_right_after_its_wait(cubin):
    """The o GEMV after the attention launches (and streams its first W batch) while the
    attention runs: the trigger within a few instructions after the wait, before the pass."""
    for sym in ROPE + PLAIN:
        f = sass.pdl_facts(cubin, sym)
        assert f.triggers_after_wait and f.trigger_at - f.wait <= 8, (sym, f)


@pytest.mark.parametrize("splits", [4, 2])
def test_the_probe_s_smaller_clusters_build_with_the_same_launch_order(splits):
    """``-D KERN_CLUSTER_SPLITS`` (probe_attn_cluster.py's knob, 8 in the build): the smaller
    clusters compile and keep the rope variants' early reads and every variant's trigger
    right after its wait, so the probe times the kernel the build would be."""
    cubin = _own_kernels_gpu.cubin_bytes("attn_decode_cluster.cu",
                                         (f"KERN_CLUSTER_SPLITS={splits}",))
    for sym in ROPE + PLAIN:
        f = sass.pdl_facts(cubin, sym)
        assert f.triggers_after_wait and f.trigger_at - f.wait <= 8, (sym, f)
    for sym in ROPE:
        assert sass.accesses_before_wait(cubin, sym) == EARLY, sym
