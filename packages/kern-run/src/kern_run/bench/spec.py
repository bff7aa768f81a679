"""``kern-run bench --spec``: prompt-lookup speculation against plain greedy decode on the
shipped prompt sets (:mod:`kern_run.spec.prompts`), both in the same process and run, plus
transformers' own prompt lookup as a peer (a child process, :mod:`.peer`).

Per prompt (chat-rendered, ``steps`` tokens, no EOS stop so every run has the same length):
:func:`kern_run.spec.spec_check` runs plain greedy, then the speculative loop, and on a
divergence reads the plain logits there (gap above 0.25 = a bug). Per set: τ (tokens per
round), acceptance, ms/token of both over the same window (first token read → last), the
speedup, τ over the prompts whose plain output has no repetition loop, and the
divergences."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..spec import load_prompt_sets, repetition_loop, spec_check, speedup


@dataclass
class SetResult:
    name: str
    prompts: int = 0
    plain_s: float = 0.0
    plain_tokens: int = 0
    spec_s: float = 0.0
    spec_tokens: int = 0
    rounds: int = 0
    round_tokens: int = 0
    round_s: float = 0.0
    host_s: float = 0.0
    host_gaps: int = 0
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    noloop_rounds: int = 0
    noloop_round_tokens: int = 0
    loops: int = 0
    identical: int = 0
    near_ties: list[float] = field(default_factory=list)
    bugs: list[str] = field(default_factory=list)

    def add(self, report) -> None:
        p, s, st = report.plain, report.spec, report.spec.spec
        self.prompts += 1
        self.plain_s += p.decode_s
        self.plain_tokens += p.decode_tokens
        self.spec_s += s.decode_s
        self.spec_tokens += s.decode_tokens
        self.rounds += st.rounds
        self.round_tokens += st.round_tokens
        self.round_s += st.round_s
        self.host_s += st.host_s
        self.host_gaps += st.host_gaps
        for i, (d, a) in enumerate(zip(st.drafted, st.accepted)):
            if i >= len(self.drafted):
                self.drafted.append(0)
                self.accepted.append(0)
            self.drafted[i] += d
            self.accepted[i] += a
        if repetition_loop(p.tokens):
            self.loops += 1
        else:
            self.noloop_rounds += st.rounds
            self.noloop_round_tokens += st.round_tokens
        d = report.divergence
        if d is None:
            self.identical += 1
        elif d.bug:
            self.bugs.append(d.describe())
        else:
            self.near_ties.append(d.gap)

    def as_dict(self) -> dict[str, Any]:
        ms = lambda s, n: 1000 * s / n if n else None  # noqa: E731
        plain, spec = ms(self.plain_s, self.plain_tokens), ms(self.spec_s, self.spec_tokens)
        return {
            "prompts": self.prompts, "plain_ms_per_token": plain, "spec_ms_per_token": spec,
            "speedup": speedup(plain, spec),
            "tau": self.round_tokens / self.rounds if self.rounds else None,
            "tau_without_loops": (self.noloop_round_tokens / self.noloop_rounds
                                  if self.noloop_rounds else None),
            "prompts_with_loops": self.loops, "rounds": self.rounds,
            "acceptance_rate": sum(self.accepted) / sum(self.drafted) if sum(self.drafted) else None,
            "acceptance": [a / d for a, d in zip(self.accepted, self.drafted) if d],
            "ms_per_round": ms(self.round_s, self.rounds),
            "host_us_per_round": 1e6 * self.host_s / self.host_gaps if self.host_gaps else None,
            "identical": self.identical, "near_tie_gaps": self.near_ties, "bugs": self.bugs}


def kern_spec(rt, info, tok, *, steps: int, k: int, ngram: tuple[int, int], capacity,
              fixed: bool, verify_max: int, limit: int | None = None) -> dict[str, dict]:
    """Both prompt sets through plain and speculative decoding on loaded runtime ``rt``
    (``info``: the contract, ``tok``: the model's tokenizer); ``limit`` prompts per set."""
    sets = load_prompt_sets()
    common = dict(steps=steps, chunk=info.max_tokens, max_tokens=info.max_tokens, eos=(),
                  capacity=capacity, fixed_context=fixed, vocab=info.vocab, k=k, ngram=ngram,
                  verify_max=verify_max)
    first = sets["open-chat"][0]
    spec_check(rt, tok.encode(tok.chat_prompt(first.text)), **common)   # warm-up
    out = {}
    for name, prompts in sets.items():
        r = SetResult(name)
        for p in prompts[:limit]:
            r.add(spec_check(rt, tok.encode(tok.chat_prompt(p.text)), **common))
        out[name] = r.as_dict()
    return out


def prompt_ids(tok, limit: int | None = None) -> dict[str, list[list[int]]]:
    """The chat-rendered prompt ids of both sets (for the peer, which gets the same ids)."""
    return {name: [tok.encode(tok.chat_prompt(p.text)) for p in prompts[:limit]]
            for name, prompts in load_prompt_sets().items()}
