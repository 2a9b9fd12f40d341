"""awq2gguf-serve's own Prometheus metrics, served at /metrics after llama-server's (its slots,
tokens and speeds): the answers by route and status (the refusals among them), key failures, and
the queue."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from .limits import Admission


class FrontMetrics:
    def __init__(self, admission: Admission, routes: set[str]):
        self.routes = routes  # any other path is counted as "other": a scanner cannot add labels without end
        self.registry = CollectorRegistry()
        self.responses = Counter("awq2gguf_responses", "Answers by route and HTTP status (4xx and 5xx: refusals)",
                                 ["route", "status"], registry=self.registry)
        self.key_failures = Counter("awq2gguf_key_failures", "Requests refused for a missing or wrong API key",
                                    registry=self.registry)
        Gauge("awq2gguf_requests_in_flight", "Generation requests decoding or waiting for a slot",
              registry=self.registry).set_function(lambda: admission.in_flight)
        Gauge("awq2gguf_queue_size", "Generation requests admitted at once (--queue); more get 503",
              registry=self.registry).set(admission.queue)

    def answered(self, path: str, status: int) -> None:
        self.responses.labels(path if path in self.routes else "other", str(status)).inc()

    def text(self) -> str:
        return generate_latest(self.registry).decode()
