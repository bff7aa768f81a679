"""``open_engine`` without a GPU: the paged-contract check, and the engine it builds over a
runtime factory (the fake), with the contract check and the tokenizer stubbed (a manifest
with the paged inputs passes kern_manifest's contract check only once that is updated)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kern_manifest.contract import ContractInfo
from kern_run import runner
from kern_run.engine import FakePagedRuntime, Request
from kern_run.engine.open import open_engine, paged_table_pages
from kern_run.errors import KernRunError
from kern_run.runner import RunOptions


def manifest(programs=("prefill", "decode", "batch"), table=("tokens", 8)):
    bufs = {} if table is None else {"block_table": SimpleNamespace(shape=list(table))}
    return SimpleNamespace(buffers=bufs, programs=dict.fromkeys(programs),
                           meta=SimpleNamespace(model="m"))


@pytest.mark.parametrize("m, match", [
    (manifest(programs=("prefill", "decode")), "no paged KV"),
    (manifest(table=None), "no paged KV"),
    (manifest(table=("tokens", "pages")), "constant P"),
])
def test_paged_contract_refusals(m, match):
    with pytest.raises(KernRunError, match=match):
        paged_table_pages(m)


def test_open_engine_over_a_runtime_factory(monkeypatch, tmp_path):
    for name in ("manifest.json", "w.safetensors", "tok.json"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "kernels").mkdir()
    info = ContractInfo(model="m", max_tokens=16, vocab=50, kv_bytes_per_token=64,
                        position_limit=100)
    monkeypatch.setattr(runner, "read_contract",
                        lambda path: (SimpleNamespace(manifest=manifest()), info))
    import kern_run.tokenizer as T
    monkeypatch.setattr(T, "load_tokenizer", lambda path: SimpleNamespace(eos_ids={7}))
    made = {}

    def factory(vm, kernels, *, weights, capacity, device):
        made.update(capacity=capacity, device=device, weights=weights)
        return FakePagedRuntime(capacity, max_tokens=16, vocab=50, table_pages=8)

    opts = RunOptions(manifest=tmp_path / "manifest.json", weights=[tmp_path / "w.safetensors"],
                      tokenizer=tmp_path / "tok.json", capacity=96, chunk=4, gpu=1)
    opened = open_engine(opts, max_seqs=64, runtime_factory=factory)
    cfg = opened.engine.cfg
    assert made == dict(capacity=96, device=1, weights=[tmp_path / "w.safetensors"])
    assert (cfg.capacity, cfg.max_seqs, cfg.table_pages, cfg.position_limit, cfg.eos,
            cfg.vocab, cfg.chunk) == (96, 16, 8, 100, frozenset({7}), 50, 4)
    assert "KV capacity 96 tokens" in opened.capacity_line
    e = opened.engine
    e.submit(Request("a", (1, 2, 3), 4))
    while e.has_work():
        e.step()
    e.close()
    assert e.rt.closed
