"""The output plan: how each ``weight`` buffer of a manifest is made from the source.

A plan file is JSON::

    {
      "version": 1,
      "weights": {
        "model.layers.{i}.self_attn.qkv_proj.weight": {"concat": [
            "model.layers.{i}.self_attn.q_proj.weight",
            "model.layers.{i}.self_attn.k_proj.weight",
            "model.layers.{i}.self_attn.v_proj.weight"]},
        "model.layers.{i}.mlp.gate_up_proj.weight": {"concat": [
            "model.layers.{i}.mlp.gate_proj.weight", "model.layers.{i}.mlp.up_proj.weight"]},
        "lm_head.weight": {"from": "model.embed_tokens.weight"},
        "rope.cos_sin": {"derived": "rope_cos_sin", "params": {"theta": 100000.0}}
      }
    }

Each key names manifest weights; ``{x}`` in a key is a placeholder matching one
dot-free name segment, substituted into the source names. Each value has exactly one of

- ``"from"``: a source tensor (HF name);
- ``"concat"``: source tensors concatenated along dim 0 (merged projections);
- ``"derived"``: a computed tensor (:mod:`.derived`), with optional ``"params"``.

A weight is made by the key equal to its name if there is one, else by the first key (in
file order) whose pattern matches, else by the **default**: the source tensor of the same
name; ``lm_head.weight`` falls back to ``model.embed_tokens.weight`` when the source has
no ``lm_head.weight`` (tied embeddings) unless the config says ``tie_word_embeddings:
false``. Without a plan file every weight gets the default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from .errors import ExportError

TIED = ("lm_head.weight", "model.embed_tokens.weight")


class Spec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    from_: str | UnsetType = msgspec.field(default=UNSET, name="from")
    concat: list[str] | UnsetType = UNSET
    derived: str | UnsetType = UNSET
    params: dict[str, Any] | UnsetType = UNSET

    def __post_init__(self) -> None:
        kinds = [k for k, v in (("from", self.from_), ("concat", self.concat),
                                ("derived", self.derived)) if v is not UNSET]
        if len(kinds) != 1:
            raise ValueError("an entry needs exactly one of `from`, `concat`, `derived`; "
                             f"found {', '.join(f'`{k}`' for k in kinds) or 'none'}")
        if self.params is not UNSET and self.derived is UNSET:
            raise ValueError("`params` is only allowed with `derived`")
        if self.concat is not UNSET and not self.concat:
            raise ValueError("`concat` needs at least one source tensor")


class PlanFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    weights: dict[str, Spec] = {}
    version: int = 1


@dataclass(frozen=True)
class Rule:
    """A resolved plan entry for one weight: where it came from and what it says."""

    kind: str  # "from" | "concat" | "derived"
    sources: tuple[str, ...] = ()
    derived: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    origin: str = "default"  # the plan key that produced it, or "default" / "tied default"


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _compile(key: str) -> re.Pattern[str] | None:
    if not _PLACEHOLDER.search(key):
        return None
    parts, pos, seen = [], 0, set()
    for m in _PLACEHOLDER.finditer(key):
        parts.append(re.escape(key[pos:m.start()]))
        name = m.group(1)
        parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>[^.]+)")
        seen.add(name)
        pos = m.end()
    parts.append(re.escape(key[pos:]))
    return re.compile("".join(parts))


class Plan:
    """A parsed plan. ``Plan()`` is the default plan."""

    def __init__(self, doc: PlanFile | None = None, where: str = "default plan") -> None:
        self.where = where
        self.doc = doc or PlanFile()
        if self.doc.version != 1:
            raise ExportError(f"{where}: plan version {self.doc.version} is not supported "
                              f"(this kern-gen reads version 1)")
        self._exact: dict[str, Spec] = {}
        self._patterns: list[tuple[str, re.Pattern[str], Spec]] = []
        for key, spec in self.doc.weights.items():
            pat = _compile(key)
            if pat is None:
                self._exact[key] = spec
            else:
                self._patterns.append((key, pat, spec))
            names = set(pat.groupindex) if pat is not None else set()
            for src in (spec.concat if spec.concat is not UNSET else
                        [spec.from_] if spec.from_ is not UNSET else []):
                extra = set(_PLACEHOLDER.findall(src)) - names
                if extra:
                    raise ExportError(f"{where}: entry `{key}`: placeholder "
                                      f"{', '.join(f'{{{x}}}' for x in sorted(extra))} in "
                                      f"`{src}` is not in the key")

    @classmethod
    def read(cls, path: str | Path) -> Plan:
        p = Path(path)
        where = f"plan `{p}`"
        try:
            raw = p.read_bytes()
        except OSError as err:
            raise ExportError(f"{where}: cannot read: {err.strerror or err}") from None
        try:
            doc = msgspec.json.decode(raw, type=PlanFile)
        except msgspec.DecodeError as err:
            raise ExportError(f"{where}: {err}") from None
        return cls(doc, where)

    def rule(self, name: str, source_names: set[str], config: dict[str, Any]) -> Rule:
        """How to make manifest weight ``name``."""
        spec, key, groups = self._exact.get(name), name, {}
        if spec is None:
            for k, pat, s in self._patterns:
                m = pat.fullmatch(name)
                if m:
                    spec, key, groups = s, k, m.groupdict()
                    break
        if spec is None:
            if (name == TIED[0] and name not in source_names
                    and config.get("tie_word_embeddings") is not False):
                return Rule("from", (TIED[1],), origin="tied-embedding default")
            return Rule("from", (name,), origin="default")

        def sub(s: str) -> str:
            return _PLACEHOLDER.sub(lambda m: groups[m.group(1)], s)

        origin = f"{self.where} entry `{key}`"
        if spec.from_ is not UNSET:
            return Rule("from", (sub(spec.from_),), origin=origin)
        if spec.concat is not UNSET:
            return Rule("concat", tuple(sub(s) for s in spec.concat), origin=origin)
        return Rule("derived", derived=spec.derived,  # type: ignore[arg-type]
                    params=dict(spec.params or {}), origin=origin)
