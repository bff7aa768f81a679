"""Issue 21's evidence on the GPU machine, against a running ``kern-serve`` (``--url``):

- ``openai``: the real openai client, completions and chat, streaming and not, on the
  bundled SmolLM2, against plain ``kern-run`` greedy (``kern_run.generate`` on its own
  runtime in this process, the same token ids) for each prompt: texts equal (or the first
  divergence reported), usage = tokens received, stream = non-stream; then a ledger: every
  request ends exactly once (one finish reason, one ``[DONE]``), and the client's counts
  equal the server's ``/metrics`` deltas.
- ``soak SECONDS``: concurrency 32 for SECONDS, 10 % of clients disconnecting mid-stream,
  5 % bad requests: no 5xx, no lost or duplicated request, GPU memory and server RSS
  before/after, running/waiting back to 0.

    python3 packages/kern-serve/device_serve.py --url http://127.0.0.1:8000 --pid PID \\
        [--out DIR] openai [soak 300]

Writes ``DIR/serve_openai.json`` / ``serve_soak.json``; exits 1 if a check failed."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

import httpx
import openai

PROMPTS = ["The capital of France is", "Why is the sky blue?", "Write a haiku about rain.",
           "List three prime numbers:", "Translate 'good morning' into Spanish.",
           "What is 12 times 12?", "Explain photosynthesis in one sentence.",
           "Once upon a time"]
STEPS = 64


def metrics(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            lab = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{lab}}}" if lab else "")] = s.value
    return out


def plain_reference(prompts: list[list[int]]) -> list[list[int]]:
    """kern-run's greedy tokens for each prompt (ids), the bundled model, batch 1."""
    from kern_runtime import Runtime
    from kern_run.defaults import bundled_default
    from kern_run.generate import generate
    from kern_run.runner import read_contract
    from kern_run.tokenizer import load_tokenizer
    b = bundled_default()
    vm, info = read_contract(b.manifest)
    tok = load_tokenizer(b.tokenizer)
    out = []
    with Runtime.load(vm, b.kernels, weights=b.weights, capacity=4096) as rt:
        for ids in prompts:
            r = generate(rt, ids, steps=STEPS, chunk=512, max_tokens=info.max_tokens,
                         eos=tok.eos_ids, capacity=4096, vocab=info.vocab)
            out.append(r.tokens)
    return out


def first_diff(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_openai(url: str) -> dict:
    from kern_run.defaults import gguf_path
    from kern_run.tokenizer import load_tokenizer
    tok = load_tokenizer(gguf_path())
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    model = c.models.list().data[0].id
    before = metrics(url)
    ids = [tok.encode(p) for p in PROMPTS] + [tok.encode(tok.chat_prompt(p)) for p in PROMPTS]
    ref = plain_reference(ids)
    rows, ok, sent, got_tokens = [], True, 0, 0
    for i, p in enumerate(PROMPTS * 2):
        chat = i >= len(PROMPTS)
        want = tok.decode(ref[i])
        for stream in (False, True):
            text, finish, usage, dones = _one(c, url, model, p, chat, stream)
            sent += 1
            got_tokens += usage["completion_tokens"]
            row = {"prompt": p, "chat": chat, "stream": stream, "equal": text == want,
                   "first_diff": first_diff(text, want), "finish": finish,
                   "usage_tokens": usage["completion_tokens"], "plain_tokens": len(ref[i]),
                   "dones": dones}
            row["ok"] = (row["equal"] and row["usage_tokens"] == row["plain_tokens"]
                         and (not stream or dones == 1))
            ok &= row["ok"]
            rows.append(row)
            print(("ok  " if row["ok"] else "BAD ") + json.dumps(row, ensure_ascii=False))
    after = metrics(url)
    d_gen = after["kern_serve_generation_tokens_total"] - before["kern_serve_generation_tokens_total"]
    d_req = sum(v - before.get(k, 0) for k, v in after.items()
                if k.startswith("kern_serve_requests_total{") and 'status="200"' in k)
    ledger = {"requests": sent, "server_requests": d_req, "tokens": got_tokens,
              "server_tokens": d_gen}
    ok &= d_req == sent and d_gen == got_tokens
    print("ledger", ledger)
    return {"ok": ok, "model": model, "rows": rows, "ledger": ledger}


def _one(c, url, model, prompt, chat, stream):
    """(text, finish, usage, [DONE] count) of one request."""
    if not stream:
        if chat:
            r = c.chat.completions.create(model=model, max_tokens=STEPS,
                                          messages=[{"role": "user", "content": prompt}])
            return r.choices[0].message.content, r.choices[0].finish_reason, \
                r.usage.model_dump(), 0
        r = c.completions.create(model=model, prompt=prompt, max_tokens=STEPS)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage.model_dump(), 0
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"model": model, "max_tokens": STEPS, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update({"messages": [{"role": "user", "content": prompt}]} if chat else
                {"prompt": prompt})
    text, finish, usage, dones = "", None, None, 0
    with httpx.stream("POST", url + path, json=body, timeout=60) as r:
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                dones += 1
                continue
            ch = json.loads(line[6:])
            usage = ch.get("usage") or usage
            for choice in ch["choices"]:
                text += (choice["delta"].get("content") or "") if chat else choice["text"]
                finish = choice["finish_reason"] or finish
    return text, finish, usage, dones


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def soak(url: str, seconds: float, pid: int | None, conc: int = 32) -> dict:
    """Closed loop at ``conc``: each request is, at random, bad (5 %: n = 2, a 400), a stream
    dropped after 3 chunks (10 %), or a full stream of 64 tokens; counts every outcome."""
    m0 = metrics(url)
    rss0 = rss_kb(pid) if pid else 0
    counts = {"ok": 0, "bad_400": 0, "dropped": 0, "5xx": 0, "other": 0, "dup_done": 0}
    ids: set[str] = set()
    dup = 0
    deadline = time.monotonic() + seconds
    http = httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=conc + 8))

    async def worker(w: int) -> None:
        nonlocal dup
        rng = random.Random(w)
        while time.monotonic() < deadline:
            x = rng.random()
            body = {"prompt": f"Soak {w} {rng.random()}", "max_tokens": 64, "stream": True,
                    "ignore_eos": True, "stream_options": {"include_usage": True}}
            if x < 0.05:
                body["n"] = 2
            async with http.stream("POST", url + "/v1/completions", json=body) as r:
                if r.status_code >= 500:
                    counts["5xx"] += 1
                    continue
                if r.status_code == 400:
                    counts["bad_400" if x < 0.05 else "other"] += 1
                    continue
                n, dones, rid = 0, 0, None
                async for line in r.aiter_lines():
                    if line == "data: [DONE]":
                        dones += 1
                    elif line.startswith("data: "):
                        n += 1
                        chunk = json.loads(line[6:])
                        rid = rid or chunk.get("id")
                        # an error event is the object {"error": ...}; generated text may
                        # contain the word (the first soak counted 8 such streams as 5xx)
                        if "error" in chunk:
                            counts["5xx"] += 1
                    if x < 0.15 and n >= 3:
                        break
                if rid in ids:
                    dup += 1
                ids.add(rid)
                if x < 0.15:
                    counts["dropped"] += 1
                elif dones == 1:
                    counts["ok"] += 1
                else:
                    counts["dup_done" if dones > 1 else "other"] += 1

    await asyncio.gather(*(worker(w) for w in range(conc)))
    await http.aclose()
    await asyncio.sleep(1.0)
    m1 = metrics(url)
    rss1 = rss_kb(pid) if pid else 0
    done = sum(v - m0.get(k, 0) for k, v in m1.items()
               if k.startswith("kern_serve_request_finish_total{"))
    res = {"counts": counts, "duplicate_ids": dup, "server_finished": done,
           "client_requests": sum(counts.values()) - counts["bad_400"],
           "running_end": m1["kern_serve_requests_running"],
           "waiting_end": m1["kern_serve_requests_waiting"],
           "pages_reserved_end": m1["kern_serve_kv_pages_reserved"],
           "gpu_bytes": [m0["kern_serve_gpu_memory_used_bytes"],
                         m1["kern_serve_gpu_memory_used_bytes"]],
           "rss_kb": [rss0, rss1]}
    res["ok"] = (counts["5xx"] == 0 and counts["other"] == 0 and counts["dup_done"] == 0
                 and dup == 0 and res["running_end"] == 0 and res["waiting_end"] == 0
                 and res["pages_reserved_end"] == 0 and res["server_finished"]
                 == res["client_requests"] and (not rss0 or rss1 <= rss0 * 1.02))
    print("soak", json.dumps(res))
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--pid", type=int, default=None, help="the API process (for its RSS)")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("steps", nargs="+")
    a = ap.parse_args()
    ok = True
    steps = list(a.steps)
    while steps:
        step = steps.pop(0)
        if step == "openai":
            r = run_openai(a.url)
            (a.out / "serve_openai.json").write_text(json.dumps(r, indent=2))
        elif step == "soak":
            secs = float(steps.pop(0)) if steps and steps[0].replace(".", "").isdigit() else 300
            r = asyncio.run(soak(a.url, secs, a.pid))
            (a.out / "serve_soak.json").write_text(json.dumps(r, indent=2))
        else:
            print(f"unknown step {step!r}", file=sys.stderr)
            return 2
        ok &= bool(r["ok"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
