"""The greedy device check's CPU parts (``device_greedy.py`` runs on the GPU machine): the
first divergence, the near-tie judgement, the table; its prompts are the GPU tests'."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "device_greedy.py"


@pytest.fixture(scope="module")
def dg():
    spec = importlib.util.spec_from_file_location("kern_run_device_greedy", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def case(dg, same=64, gap=None, ids_equal=True, margin=None):
    return dg.Case(0, False, 5, ids_equal, same, 64, margin, gap, " Paris")


def test_first_divergence(dg):
    assert dg.first_divergence([1, 2, 3], [1, 2, 3]) == 3
    assert dg.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert dg.first_divergence([7], [8]) == 0
    assert dg.first_divergence([1, 2], [1, 2, 3]) == 2


def test_judgement(dg):
    assert dg.case_ok(case(dg))
    assert dg.case_ok(case(dg, same=40, gap=0.125, margin=0.125))
    assert dg.case_ok(case(dg, same=40, gap=0.5, margin=0.5))          # at the bound
    assert not dg.case_ok(case(dg, same=40, gap=0.75, margin=0.75))
    assert dg.case_ok(case(dg, same=40, gap=0.75, margin=0.75), near=1.0)
    assert not dg.case_ok(case(dg, ids_equal=False))                   # tokenizers differ


def test_table(dg):
    out = dg.lines([case(dg), case(dg, same=40, gap=0.125, margin=0.25),
                    case(dg, same=3, gap=2.0, margin=2.0)])
    assert out[0].split()[:5] == ["prompt", "chat", "ids", "ids==HF", "identical"]
    assert out[1].split()[:6] == ["0", "no", "5", "True", "64/64", "ok"]
    assert out[2].split()[4:8] == ["40/64", "0.250", "0.125", "ok"]
    assert out[3].split()[7] == "BAD"
    assert out[-1] == ("summary: 1/3 cases identical over 64 tokens; 2 diverge, 1 of them at a "
                       "near-tie (gap <= 0.5); bad cases: 1")


def test_prompts_are_the_gpu_tests(dg):
    # by path: other packages have a test_gpu module too
    spec = importlib.util.spec_from_file_location("kern_run_test_gpu",
                                                  Path(__file__).parent / "test_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert dg.PROMPTS == mod.PROMPTS and len(dg.PROMPTS) >= 5
