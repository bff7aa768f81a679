"""``/metrics`` parses with prometheus-client's own parser and counts what clients got."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

FAMILIES = {"kern_serve_requests", "kern_serve_request_finish", "kern_serve_prompt_tokens",
            "kern_serve_generation_tokens", "kern_serve_requests_running",
            "kern_serve_requests_waiting", "kern_serve_kv_pages_total",
            "kern_serve_kv_pages_reserved", "kern_serve_kv_pages_used",
            "kern_serve_gpu_memory_used_bytes", "kern_serve_time_to_first_token_seconds",
            "kern_serve_inter_token_latency_seconds", "kern_serve_time_per_output_token_seconds",
            "kern_serve_e2e_request_latency_seconds", "kern_serve_engine_step_seconds",
            "kern_serve_engine_host_seconds", "kern_serve_model_info"}


def test_metrics_parse_and_count(server, client, model):
    text = httpx.get(server.url + "/metrics").text
    names = {f.name for f in text_string_to_metric_families(text)}
    assert FAMILIES <= names, FAMILIES - names
    before = server.metrics()
    r = client.completions.create(model=model, prompt="Count me", max_tokens=7)
    s = client.completions.create(model=model, prompt="Count me too", max_tokens=5, stream=True,
                                  stream_options={"include_usage": True})
    usage = [c.usage for c in s if c.usage][0]
    after = server.metrics()

    def delta(key: str) -> float:
        return after.get(key, 0) - before.get(key, 0)

    assert delta('kern_serve_requests_total{endpoint="completions",status="200"}') == 2
    assert delta('kern_serve_request_finish_total{reason="length"}') == 2
    assert delta("kern_serve_generation_tokens_total") == r.usage.completion_tokens + \
        usage.completion_tokens == 12
    assert delta("kern_serve_prompt_tokens_total") == r.usage.prompt_tokens + usage.prompt_tokens
    assert delta("kern_serve_time_to_first_token_seconds_count") == 2
    assert delta("kern_serve_e2e_request_latency_seconds_count") == 2
    assert delta("kern_serve_inter_token_latency_seconds_count") == 12 - 2
    assert after["kern_serve_kv_pages_total"] == 511
    assert after['kern_serve_model_info{model="fake-smollm2"}'] == 1
    assert any(k.startswith("kern_serve_engine_step_seconds_count{") for k in after)
    assert after["kern_serve_engine_host_seconds_count"] >= 1
