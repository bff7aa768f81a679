"""Which speculation a run gets (``--spec [dspark|ngram]``), checked before the GPU: the
drafter, the drafts per round, the DSpark files; and the loop that runs it.

``--spec`` alone (``"auto"``) picks DSpark when the manifest has the ``draft`` program and
prompt lookup (n-gram) otherwise; ``--spec dspark`` / ``--spec ngram`` force one (DSpark on a
manifest without a draft is an error)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kern_manifest import Manifest
from kern_manifest.contract import DRAFT, ContractInfo, check_dspark, check_verify

from ..errors import KernRunError
from .dspark import DraftSpec, check_dspark_options, dspark_generate
from .dspark_files import DSparkFiles, dspark_files
from .loop import DEFAULT_K, SpecResult, check_spec_options, spec_generate

#: ``--spec`` values (``auto``: the bare option).
CHOICES = ("auto", "dspark", "ngram")


@dataclass(frozen=True)
class SpecPlan:
    drafter: str                     # "dspark" | "ngram"
    k: int                           # drafts per round at most
    verify_max: int
    ngram: tuple[int, int] = (2, 4)
    draft: DraftSpec | None = None   # DSpark: block and mask token (dspark.json)
    files: DSparkFiles | None = None
    accept: bool = False             # DSpark: verify ends with the in-graph acceptance step
    prefill_precompute: bool = False  # DSpark: the prompt's chunks have their own precompute

    @property
    def draft_file(self) -> Path | None:
        return self.files.draft if self.files is not None else None


def plan_spec(spec: str, k: int | None, ngram: tuple[int, int], manifest: Path, m: Manifest,
              info: ContractInfo) -> SpecPlan:
    """The speculation ``--spec spec`` asks of manifest ``m`` (at ``manifest``), every check
    that needs no GPU done: the verify contract, and for DSpark :func:`check_dspark`, the
    files beside the manifest and the drafts per round (default: the block)."""
    if spec not in CHOICES:
        raise KernRunError(f"--spec {spec!r}: give no value (DSpark when the manifest has a "
                           f"draft, else ngram), dspark or ngram")
    has_draft = DRAFT in m.programs
    drafter = ("dspark" if has_draft else "ngram") if spec == "auto" else spec
    if drafter == "ngram":
        vmax = check_verify(m)
        k = DEFAULT_K if k is None else k
        check_spec_options(k, ngram, info.max_tokens, vmax)
        return SpecPlan("ngram", k, vmax, ngram)
    if not has_draft:
        raise KernRunError(f"--spec dspark: the manifest `{manifest}` has no `{DRAFT}` program "
                           f"(no DSpark draft; `kern-gen dspark` writes one); use --spec ngram")
    ds = check_dspark(m)
    files = dspark_files(manifest, m, info, ds)
    draft = DraftSpec(files.config.block, files.config.mask_token_id)
    k = draft.block if k is None else k
    check_dspark_options(draft, k, info.max_tokens, ds.verify_max)
    return SpecPlan("dspark", k, ds.verify_max, ngram, draft, files,
                    accept=ds.accept_mask is not None,
                    prefill_precompute=ds.prefill_precompute)


def gpu_timer_for(rt: object) -> Callable[[], object] | None:
    """Timing events on a loaded kern runtime (:mod:`kern_runtime.timing`); None for any
    other runtime-like object (the tests' fakes)."""
    from kern_runtime import Runtime
    if not isinstance(rt, Runtime):
        return None
    from kern_runtime.timing import timing_event
    return lambda: timing_event(rt)


def speculate(plan: SpecPlan, rt: object | None = None, gpu_times: bool = False,
              chain: bool = True, ahead: bool = True,
              pipeline: bool = True, round_graph: str = "memcpy") -> Callable[..., SpecResult]:
    """The loop of ``plan`` taking :func:`~kern_run.generate.generate`'s arguments (for
    :func:`~kern_run.spec.check.spec_check`'s ``speculate`` or a direct call).
    ``gpu_times``: DSpark's GPU split by timing events on ``rt`` (a few µs per round; the
    chained loop then); ``chain``: DSpark's verify queued behind its draft, ``ahead``: and
    the precompute of its rows behind verify (:mod:`.dspark`); ``pipeline``: and each round
    queued before the previous is read, where the manifest has the in-graph acceptance
    (:mod:`.dspark_pipeline`), ``round_graph``: such a round as one graph (its copies in the
    runtime's copy kernel or memcpy nodes) or ``"off"``."""
    if plan.drafter == "dspark":
        timer = gpu_timer_for(rt) if gpu_times and rt is not None else None
        return partial(dspark_generate, draft=plan.draft, k=plan.k,
                       verify_max=plan.verify_max, gpu_timer=timer, chain=chain,
                       ahead=ahead, pipeline=pipeline and plan.accept, round_graph=round_graph,
                       prefill_precompute=plan.prefill_precompute)
    return partial(spec_generate, k=plan.k, ngram=plan.ngram, verify_max=plan.verify_max)
