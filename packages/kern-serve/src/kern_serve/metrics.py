"""``/metrics``: the server's Prometheus metrics (prometheus-client, one registry per app).

Counters are kept in the API process (what clients were sent); gauges come from the engine
process's latest :class:`~kern_serve.protocol.Snapshot`, read when ``/metrics`` is scraped;
step histograms from each :class:`~kern_serve.protocol.Steps`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

P = "kern_serve_"
LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
           10.0, 30.0, 60.0)
STEP = (0.0002, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.5, 1.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(P + "requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.finished = Counter(P + "request_finish", "Completions finished, by finish reason",
                                ["reason"], registry=r)
        self.prompt_tokens = Counter(P + "prompt_tokens", "Prompt tokens of admitted requests",
                                     registry=r)
        self.generation_tokens = Counter(P + "generation_tokens",
                                         "Generated tokens received from the engine", registry=r)
        g = {}
        for name, doc in (("requests_running", "Sequences in the engine's running batch"),
                          ("requests_waiting", "Sequences admitted and waiting for the batch"),
                          ("kv_pages_total", "Pages of the KV pool"),
                          ("kv_pages_reserved", "KV pages reserved by admitted sequences"),
                          ("kv_pages_used", "KV pages holding tokens"),
                          ("gpu_memory_used_bytes", "GPU memory in use (engine process)"),
                          ("engine_steps", "Engine steps run"),
                          ("engine_ready", "1 when the engine takes requests")):
            g[name] = Gauge(P + name, doc, registry=r)
        self.gauges = g
        self.info = Gauge(P + "model_info", "The served model (set once the engine is ready)",
                          ["model"], registry=r)
        self.ttft = Histogram(P + "time_to_first_token_seconds", "Time to first token",
                              buckets=LATENCY, registry=r)
        self.itl = Histogram(P + "inter_token_latency_seconds", "Time between tokens",
                             buckets=LATENCY, registry=r)
        self.tpot = Histogram(P + "time_per_output_token_seconds",
                              "Per request: (end-to-end - TTFT) / (tokens - 1)",
                              buckets=LATENCY, registry=r)
        self.e2e = Histogram(P + "e2e_request_latency_seconds", "End-to-end request latency",
                             buckets=LATENCY, registry=r)
        self.step = Histogram(P + "engine_step_seconds", "Engine step time, by batch bucket",
                              ["bucket"], buckets=STEP, registry=r)
        self.host = Histogram(P + "engine_host_seconds",
                              "Engine host time per step (waits on the device excluded), "
                              "averaged over each snapshot interval (0.1 s)",
                              buckets=STEP, registry=r)
        self._step_children: dict[int, Histogram] = {}
        self._host_mark: tuple[int, float] = (0, 0.0)   # (steps, host ms) at the last snapshot

    def observe_steps(self, step_s: float, bucket: int) -> None:
        child = self._step_children.get(bucket)
        if child is None:
            child = self._step_children[bucket] = self.step.labels(bucket=str(bucket))
        child.observe(step_s)

    def observe_snapshot(self, s) -> None:
        """One observation of the host time per step over the steps since the last one."""
        total = s.host_ms_per_step * s.steps
        steps0, total0 = self._host_mark
        if s.steps > steps0:
            self.host.observe((total - total0) / (s.steps - steps0) / 1000)
        self._host_mark = (s.steps, total)

    def render(self, snapshot, ready: bool) -> bytes:
        g = self.gauges
        g["engine_ready"].set(1 if ready else 0)
        if snapshot is not None:
            for name, v in (("requests_running", snapshot.running),
                            ("requests_waiting", snapshot.waiting),
                            ("kv_pages_total", snapshot.pages_total),
                            ("kv_pages_reserved", snapshot.pages_reserved),
                            ("kv_pages_used", snapshot.pages_used),
                            ("gpu_memory_used_bytes", snapshot.gpu_bytes),
                            ("engine_steps", snapshot.steps)):
                g[name].set(v)
        return generate_latest(self.registry)
