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

from ..spec import load_prompt_sets, repetition_loop, spec_check, speedup, verify_contract


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
    """Every prompt set through plain and speculative decoding on loaded runtime ``rt``
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
    """The chat-rendered prompt ids of every set (for the peer, which gets the same ids)."""
    return {name: [tok.encode(tok.chat_prompt(p.text)) for p in prompts[:limit]]
            for name, prompts in load_prompt_sets().items()}


#: issue 14's targets: verify(8) ≤ 1.25 decode steps; input-grounded ≥ 1.6x plain with
#: τ ≥ 2.5; open chat ≥ 0.97x plain (the math-code set, issue 15's, has none for n-gram).
SPEC_TARGETS = {"verify_ratio": 1.25, "input-grounded": 1.6, "open-chat": 0.97,
                "math-code": 0.97, "tau": 2.5}
PEER_PROMPTS = 8


def verify_cost(rt, k: int) -> dict:
    """GPU ms of back-to-back ``decode`` and ``verify`` (tokens = k + 1) graphs at position
    :data:`.torch_side.PROFILE_POS` (written first: the inputs hold whatever ran last, e.g.
    the end of a 1022-token prefill, where k + 1 more rows would pass a fixed context)."""
    from ..inputs import write_at
    from . import kern_graph_ms
    from .torch_side import PROFILE_POS
    write_at(rt, [1] * (k + 1), PROFILE_POS)
    dec = kern_graph_ms(rt, "decode", {"tokens": 1})
    ver = kern_graph_ms(rt, "verify", {"tokens": k + 1})
    return {"decode_ms": dec, "verify_ms": ver, "tokens": k + 1, "ratio": ver / dec}


def spec_rows(rep, case: str, v: dict | None) -> None:
    if not v:
        return
    rep.data.setdefault(f"{case}_verify", v)
    t = SPEC_TARGETS["verify_ratio"]
    rep.add(case, f"verify({v['tokens']}) / decode GPU ms", f"{v['ratio']:.2f}",
            f"{v['verify_ms']:.3f} / {v['decode_ms']:.3f} ms", f"≤ {t}",
            "met" if v["ratio"] <= t else "MISSED")


def smollm2_spec(rt, info, b, *, steps: int, k: int, capacity, fixed: bool,
                 limit: int | None) -> dict:
    from ..tokenizer import load_tokenizer
    from kern_manifest import read
    tok = load_tokenizer(b.tokenizer)
    vmax = verify_contract(read(b.manifest))
    out = kern_spec(rt, info, tok, steps=steps, k=k, ngram=(2, 4), capacity=capacity,
                    fixed=fixed, verify_max=vmax, limit=limit)
    out["_ids"] = prompt_ids(tok, limit)
    return out


def spec_set_rows(rep, sp: dict, peer: dict | None) -> None:
    for name in ("input-grounded", "open-chat", "math-code"):
        r = sp.get(name)
        if not r:
            continue
        f = lambda x, fmt: "–" if x is None else format(x, fmt)  # noqa: E731
        t = SPEC_TARGETS[name]
        sx = r["speedup"]
        pr = (peer or {}).get(name)
        rep.add(f"spec {name}", f"ms/token spec vs plain ({r['prompts']} prompts)",
                f"{f(r['spec_ms_per_token'], '.3f')} vs {f(r['plain_ms_per_token'], '.3f')}",
                f"HF lookup {pr['speedup']:.2f}x ({pr['prompts']} prompts)" if pr else "",
                f"≥ {t}x" + (f", τ ≥ {SPEC_TARGETS['tau']}" if name == "input-grounded" else ""),
                f"{f(sx, '.2f')}x: " + ("met" if sx and sx >= t else "MISSED"))
        rep.add(f"spec {name}", "τ tokens/round (without loops)",
                f"{f(r['tau'], '.2f')} ({f(r['tau_without_loops'], '.2f')})",
                note=f"{r['rounds']} rounds, {r['prompts_with_loops']} outputs loop, "
                     f"acceptance {f(r['acceptance_rate'], '.2f')}")
        rep.add(f"spec {name}", "round ms / host µs per round",
                f"{f(r['ms_per_round'], '.3f')} / {f(r['host_us_per_round'], '.1f')}",
                note=f"identical {r['identical']}/{r['prompts']}, near-ties "
                     f"{len(r['near_tie_gaps'])} (max gap "
                     f"{max(r['near_tie_gaps'], default=0):.3f}), bugs {len(r['bugs'])}")
