"""The hand-written wiring of a Llama-family forward onto a captured Inductor graph.

The generator knows the model: per layer ``input_layernorm -> q,k,v projections -> rope on
q; rope on k fused with the K-cache write; V-cache write -> attention -> o_proj -> residual
add + post_attention_layernorm -> gate, up -> SiLU*mul -> down``, then ``model.norm`` and the
tied ``lm_head``.  Inductor fuses and schedules these into call sites; this module *names*
each captured site by its role (from the kernel name Inductor derives from the fused ops),
checks it against the model (:mod:`.falsify`), and emits :class:`.ir.Op` s (one handler per
role, :mod:`.roles`):

- mined sites (RMSNorm with its residual adds, q rope, k rope + K-cache write, V-cache
  write, SiLU*mul) are replayed with their captured ABI and literals;
- GEMMs (nvjet, packed params) become ``extern:cublaslt_bf16_tn`` with A/W/C taken from
  the pointers inside the packed struct (``roles.GEMM_A/W/C``: bytes 240/176/328);
- embedding, the rope angle computation (a cutlass sgemm with a by-value struct),
  attention (flex-attention templates over per-forward block masks and a repeat_kv copy of
  the whole cache) and the final argmax become own kernels;
- block-mask building, repeat_kv copies, flex partial/reduce kernels, the prefill
  transpose of the flex output (head-major ``[heads, tokens, head_dim]``, stored in the q
  rope output's storage) to the token-major o_proj input, and the positions' float
  conversion for the angle sgemm are dropped -- their only consumers are replaced.  q after
  rope is token-major ``[tokens, heads*head_dim]`` in both graphs (the own attention reads it
  with row stride ``heads*head_dim`` and writes token-major), the rope angles are
  ``[head_dim/2, tokens]`` (``tests/test_llama_inductor_evidence.py`` checks both against
  Inductor's generated code).

Inductor's residual stream does **not** keep one address: fused RMSNorm kernels take the
running residual *and* the pending attention/MLP outputs and recompute the sum, storing it
(``in_out_ptr``) only every few layers.  So the wiring does not assume a residual buffer;
it replays Inductor's buffer plan: each activation address of the forward (per dtype) is
one workspace buffer, and the generator proves that every buffer a kept kernel reads was
written earlier by a kept or substituted kernel (:func:`.ir.check_dataflow`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .arch import Arch
from .config import ModelConfig
from .errors import WiringError
from .facts import Facts, Site
from . import falsify as F
from .ir import NEXT_TOKEN, TOK, Buf, Op, Program, Ref, check_dataflow, used_buffers
from .kv import KVLayout
from .roles import HANDLERS


class Acts:
    """Activation addresses -> workspace buffers, keyed by (address, dtype): Inductor's
    buffer plan replayed, one workspace per address and dtype of the forward."""

    def __init__(self, program: str) -> None:
        self.program = program
        self.bufs: dict[str, Buf] = {}
        self.by_key: dict[tuple[int, str], str] = {}

    def get(self, addr: int, dtype: str, width: int, label: str) -> Ref:
        key = (addr, dtype)
        name = self.by_key.get(key)
        if name is None:
            name = f"{self.program}.{label}"
            n = 2
            while name in self.bufs:
                name, n = f"{self.program}.{label}.{n}", n + 1
            self.by_key[key] = name
            self.bufs[name] = Buf(name, dtype, width, "workspace")
        b = self.bufs[name]
        b.width = max(b.width, width)
        return Ref(buf=name)


@dataclass(frozen=True)
class Inputs:
    """What every program is wired from: the facts, the model, its architecture, the KV
    layout, and the two captured groups (the one-token graph and the dynamic one)."""
    facts: Facts
    cfg: ModelConfig
    arch: Arch
    kv: KVLayout
    decode_group: int
    prefill_group: int


@dataclass(frozen=True)
class Cut:
    """What a program asks of the walk (:mod:`.programs`): its name, which captured graph,
    and where the forward's results go."""
    program: str
    group: int
    one_token: bool = False       # the one-token graph (rows = 1); else the dynamic one
    logits: Ref | None = None     # lm_head's C (None: a workspace of the program)
    every_row: bool = False       # lm_head multiplies every row of the final norm's output
    argmax_out: Ref = NEXT_TOKEN  # where the greedy argmax writes


@dataclass
class Wiring:
    """The walk's state, shared by the role handlers (:mod:`.roles`)."""
    facts: Facts
    cfg: ModelConfig
    arch: Arch
    kv: KVLayout
    cut: Cut
    acts: Acts
    gemm_names: list[str]         # every GEMM's weight, in call order
    norm_names: list[str]         # every RMSNorm's weight, in call order
    expected: dict[str, int]      # role -> sites the model has
    count: dict[str, int]         # role -> sites seen so far
    ops: list[Op] = field(default_factory=list)
    pending_splitk: Site | None = None     # a split-K GEMM waiting for its reduce
    gemm_c: dict[str, int] = field(default_factory=dict)    # "layer.proj" -> C address
    layer_q: dict[int, tuple[Ref, Site]] = field(default_factory=dict)  # the roped q
    layer_tr: dict[int, int] = field(default_factory=dict)  # prefill transpose's output
    angles: Ref | None = None                  # the rope angles
    final_norm: tuple[int, Ref] | None = None  # (address, ref) of model.norm's output
    logits: Ref | None = None                  # the lm_head GEMM's output
    last_cache_write: int = -1                 # ops through the last V-cache write

    @classmethod
    def start(cls, g: Inputs, cut: Cut) -> Wiring:
        cfg, arch = g.cfg, g.arch
        gemms = arch.gemm_weights(cfg, "lm_head.weight" in g.facts.weights)
        norms = arch.norm_weights(cfg)
        expected = {"gemm": len(gemms), "norm": len(norms),
                    **{r: n * cfg.layers for r, n in arch.sites_per_layer(cut.one_token).items()}}
        return cls(g.facts, cfg, arch, g.kv, cut, Acts(cut.program), gemms, norms, expected,
                   dict.fromkeys(expected, 0))

    @property
    def program(self) -> str:
        return self.cut.program

    @property
    def group(self) -> int:
        return self.cut.group

    @property
    def decode(self) -> bool:
        """Walking the one-token graph (else the dynamic one): layouts and literals differ."""
        return self.cut.one_token

    def enter(self, s: Site, role: str, per_layer: bool = False) -> tuple[int, str]:
        """(index of this site among the role's sites, its ``where`` for messages); a
        split-K GEMM must be followed directly by its reduce."""
        if self.pending_splitk is not None:
            F.fail(self.pending_splitk.where(self.program, "gemm"), f"split-K GEMM not "
                   f"followed by its cuBLASLt reduce (next: site {s.index} `{s.name}`)")
        k = self.count.get(role, 0)
        self.count[role] = k + 1
        return k, s.where(self.program, f"{role}, layer {k}" if per_layer else role)

    def check_counts(self) -> None:
        """After the walk: no split-K GEMM left open, site counts per role as the model's."""
        if self.pending_splitk is not None:
            F.fail(self.pending_splitk.where(self.program, "gemm"),
                   "split-K GEMM without its reduce")
        for r, n in self.expected.items():
            if self.count[r] != n:
                raise WiringError(f"{self.program} (group {self.group}): {self.count[r]} "
                                  f"`{r}` sites; the model has {n}")

    def finish(self, ops: list[Op]) -> Program:
        """The program of ``ops`` (checked: every buffer read was written before) and the
        workspaces they use."""
        check_dataflow(self.program, ops)
        used = used_buffers(ops)
        bufs = {k: b for k, b in self.acts.bufs.items() if k in used}
        return Program(self.program, 1 if self.decode else TOK, ops, bufs)


def wire(g: Inputs, cut: Cut) -> Wiring:
    """Walk the cut's captured group in call order, each site through its role's handler
    (see the module doc), and check the site counts; the caller keeps the ops it needs
    (:mod:`.programs`) and finishes the program (:meth:`Wiring.finish`)."""
    w = Wiring.start(g, cut)
    for s in g.facts.sites(cut.group):
        HANDLERS[g.arch.role_of(s)](w, s)
    w.check_counts()
    return w
