"""Speculative greedy decoding for kern-run (``--spec``; DESIGN.md §7): a drafter proposes
tokens, the target's ``verify`` program checks them in one call, the caller keeps the
longest agreeing prefix plus the correction (lossless: the output is plain greedy's).

- :mod:`.ngram`: prompt-lookup drafting (no weights);
- :mod:`.accept`: the accept rule;
- :mod:`.loop`: the round loop with the plain pipelined decode as fallback;
- :mod:`.stats`: τ, acceptance per draft position, round and host times, speedup;
- :mod:`.check`: ``--spec-check``, plain vs speculative in one process;
- ``verify_contract`` (:func:`kern_manifest.contract.check_verify`): what ``--spec`` needs
  from a manifest;
- :mod:`.prompts`: the prompt sets of ``kern-run bench --spec``."""

from kern_manifest.contract import check_verify as verify_contract

from .accept import accept_prefix, emitted
from .check import BUG_GAP, CheckReport, Divergence, spec_check
from .loop import (DEFAULT_K, PREDICTIONS, VERIFY, VERIFY_MAX, Proposer, SpecResult,
                   check_spec_options, spec_generate, verify_widths)
from .ngram import DEFAULT_NGRAM, NgramProposer
from .prompts import SETS, SpecPrompt, load_prompt_sets
from .stats import SpecStats, repetition_loop, speedup

__all__ = ["BUG_GAP", "CheckReport", "DEFAULT_K", "DEFAULT_NGRAM", "Divergence",
           "NgramProposer", "PREDICTIONS", "Proposer", "SETS", "SpecPrompt", "SpecResult",
           "SpecStats", "VERIFY", "VERIFY_MAX", "accept_prefix", "check_spec_options",
           "emitted", "load_prompt_sets", "repetition_loop", "spec_check", "spec_generate",
           "speedup", "verify_widths"]
