"""Everything ``kern-run bench`` does with torch, each in a child process: the baseline
(transformers + ``torch.compile(mode="reduce-overhead", fullgraph=True)`` around a one-token
decode step on a ``StaticCache``), the seeded random transformers checkpoint of the Qwen3-4B
shape, and the ``--profile`` kernel records of one kern decode step (torch.profiler).

Why a child: torch leaves state in its process (a CUDA context with its allocator cache,
Inductor's compile workers, CUDA graph pools, a subscribed CUPTI), and kern's numbers must not
depend on whether torch ran before them; the reverse holds too. H200, 2026-11-30: with the
SmolLM2 baseline earlier in the same process the Qwen3 decode step ran 7 % slower on the GPU,
and after a torch.profiler session every launch paid ~0.25 ms of host time per step. The
child is ``python -m kern_run.bench SPEC_JSON`` (:mod:`.__main__` calls :func:`main`;
``{"op": "decode" | "checkpoint" | "profile", ...}``); it prints
its result as one JSON object on the last line of stdout (``{"ok": true, ...}`` or
``{"ok": false, "error": "..."}``); its stderr (compile warnings, progress) passes through.

torch and transformers are imported only in the child."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import KernRunError

SEED = 0
#: Tokens of the StaticCache (the examples' fixed context).
CACHE_LEN = 1024
#: Prompt length before the timed decode steps (kern's bench uses the same).
PROMPT = 16


def baseline_decode(model_dir: Path | None, config: dict | None, *, steps: int, reps: int,
                    gpu: int) -> dict:
    """Median over ``reps`` generations of the per-token median ms (first two tokens of each
    generation dropped) of the compiled static-cache decode step, each token's argmax read
    back to the host like kern's loop. ``model_dir``: a transformers checkpoint; else
    ``config``: a transformers config dict, weights seeded random. In this process."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, StaticCache

    dev = torch.device("cuda", gpu)
    torch.manual_seed(SEED)
    if model_dir is not None:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    else:
        cfg = AutoConfig.for_model(**config)  # type: ignore[arg-type]
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model = model.to(dev).eval()
    cache = StaticCache(config=model.config, max_cache_len=CACHE_LEN)

    def step(ids, cpos):
        out = model(input_ids=ids, cache_position=cpos, position_ids=cpos.unsqueeze(0),
                    past_key_values=cache, use_cache=True)
        return out.logits[:, -1].argmax(-1)

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    samples = []
    t_compile = time.perf_counter()
    with torch.no_grad():
        for rep in range(reps + 1):
            cache.reset()
            prompt = torch.arange(PROMPT, device=dev).unsqueeze(0) + 100
            tok = step(prompt, torch.arange(PROMPT, device=dev)).view(1, 1)
            times = []
            for i in range(steps):
                torch.compiler.cudagraph_mark_step_begin()
                t0 = time.perf_counter()
                tok = compiled(tok, torch.tensor([PROMPT + i], device=dev)).view(1, 1).clone()
                int(tok.item())
                times.append(time.perf_counter() - t0)
            if rep == 0:
                t_compile = time.perf_counter() - t_compile
                continue
            samples.append(statistics.median(times[2:]))
    return {"decode_ms": 1000 * statistics.median(samples), "compile_s": t_compile,
            "samples_ms": [1000 * s for s in samples],
            "transformers": transformers.__version__, "torch": torch.__version__}


def random_hf_checkpoint(out: Path, config: dict, seed: int = SEED) -> Path:
    """A seeded random transformers checkpoint of ``config`` (bf16) in ``out``, made once.
    In this process."""
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(**config)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(out)
    return out


def baseline_in_child(model_dir: Path | None, config: dict | None, *, steps: int, reps: int,
                      gpu: int, timeout_s: float = 900) -> dict:
    """:func:`baseline_decode` in a fresh ``python -m kern_run.bench`` process."""
    s = {"op": "decode", "model_dir": None if model_dir is None else str(model_dir),
         "config": config, "steps": steps, "reps": reps, "gpu": gpu}
    return child_json(child_cmd(s), "baseline", timeout_s)


def checkpoint_in_child(out: Path, config: dict, timeout_s: float = 900) -> Path:
    """:func:`random_hf_checkpoint` in a fresh child process (nothing to do if it exists)."""
    if (out / "config.json").is_file():
        return out
    child_json(child_cmd({"op": "checkpoint", "out": str(out), "config": config}),
               f"random checkpoint `{out}`", timeout_s)
    return out


#: Position of the profiled decode step (its attention reads PROFILE_POS + 1 keys): the middle
#: of the bench's decode range (a 16-token prompt + 128 steps).
PROFILE_POS = 80


def profile_decode(rt: Any, gpu: int, position: int = PROFILE_POS) -> list[tuple[str, float, float]]:
    """Kernel records ``(name, start_us, dur_us)`` of :data:`.profile.STEPS` back-to-back
    decode steps (``tokens`` = 1) of loaded runtime ``rt`` at ``position`` (written first:
    the inputs would otherwise hold whatever ran last). In this process."""
    from ..inputs import write_at
    from .profile import record_program
    write_at(rt, [1], position)
    return record_program(rt, "decode", {"tokens": 1}, gpu=gpu)


def profile_in_child(manifest: Path, kernels: Path, weights: list[Path], capacity: int | None,
                     gpu: int, timeout_s: float = 600) -> dict:
    """:func:`profile_decode` of a runtime loaded in a fresh child process:
    ``{"events": [[name, start_us, dur_us], ...], "steps": n}``."""
    s = {"op": "profile", "manifest": str(manifest), "kernels": str(kernels),
         "weights": [str(w) for w in weights], "capacity": capacity, "gpu": gpu}
    return child_json(child_cmd(s), "decode profile", timeout_s)


def lookup_in_child(gguf: Path, sets: dict[str, list[list[int]]], *, steps: int, gpu: int,
                    timeout_s: float = 900) -> dict:
    """:func:`.peer.lookup_peer` (transformers' prompt lookup vs its plain greedy) in a fresh
    child process: ``{set: {...}}``."""
    s = {"op": "lookup", "gguf": str(gguf), "sets": sets, "steps": steps, "gpu": gpu}
    return child_json(child_cmd(s), "transformers prompt lookup", timeout_s)["sets"]


def child_cmd(spec: dict) -> list[str]:
    return [sys.executable, "-m", "kern_run.bench", json.dumps(spec)]


def run_spec(s: dict) -> dict:
    """Do what child spec ``s`` says, in this process; the result's JSON-ready fields."""
    if s.get("op") == "decode":
        return baseline_decode(None if s["model_dir"] is None else Path(s["model_dir"]),
                               s["config"], steps=int(s["steps"]), reps=int(s["reps"]),
                               gpu=int(s["gpu"]))
    if s.get("op") == "checkpoint":
        return {"path": str(random_hf_checkpoint(Path(s["out"]), s["config"]))}
    if s.get("op") == "profile":
        from kern_runtime import Runtime
        from .profile import STEPS
        with Runtime.load(Path(s["manifest"]), Path(s["kernels"]),
                          weights=[Path(w) for w in s["weights"]], capacity=s["capacity"],
                          device=int(s["gpu"]), progress=None) as rt:
            return {"events": profile_decode(rt, int(s["gpu"])), "steps": STEPS}
    if s.get("op") == "lookup":
        from .peer import lookup_peer
        return {"sets": lookup_peer(Path(s["gguf"]), s["sets"], steps=int(s["steps"]),
                                    gpu=int(s["gpu"]))}
    raise KernRunError(f"unknown op {s.get('op')!r} (decode, checkpoint, profile, lookup)")


def child_json(cmd: list[str], what: str, timeout_s: float) -> dict:
    """Run ``cmd`` (stderr passes through) and return the JSON object on its last stdout line
    when it says ``"ok": true``; otherwise a :class:`KernRunError` naming ``what`` and why."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise KernRunError(f"{what}: the child process ran past {timeout_s:g} s") from None
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    try:
        res = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        res = None
    if not isinstance(res, dict):
        raise KernRunError(f"{what}: the child process exited {p.returncode} without a "
                           f"JSON result line")
    if not res.get("ok"):
        raise KernRunError(f"{what}: {res.get('error', 'failed')}")
    return {k: v for k, v in res.items() if k != "ok"}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    res: dict[str, Any]
    try:
        if len(args) != 1:
            raise KernRunError("usage: python -m kern_run.bench SPEC_JSON")
        res = {"ok": True, **run_spec(json.loads(args[0]))}
    except Exception as err:  # reported to the parent as one line, not a traceback
        first = (str(err).splitlines() or [""])[0]
        res = {"ok": False, "error": f"{type(err).__name__}: {first}"}
    print(json.dumps(res), flush=True)
    return 0 if res["ok"] else 1

