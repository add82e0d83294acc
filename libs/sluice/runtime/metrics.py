"""Metrics on prometheus_client, one CollectorRegistry per service.

Nothing here is global: the composition root creates the process's `Registry` and passes it to what
it runs. Each service gets its own registry (`registry.service("checker")`): in standalone mode
several services share a process, report families of the same names (their consumers, their
outboxes), and the process's exposition merges them into one family each, every sample labelled
`service`. The process's registry also carries the process-wide families (the gRPC server's, the
event log's) and prometheus_client's process, platform and garbage-collector collectors.

Asking a registry twice for the same metric returns the same metric, so several consumers of one
service share a family. State a service already holds is reported by a Collector read at scrape
time (`register`), not by counters updated beside it.

    registry = Registry()
    checker = registry.service("checker")
    handled = checker.counter("sluice_consumer_messages_total", "Messages handled.", ("topic", "group"))
    handled.labels(topic="sluice.jobs", group="constraint-checker").inc()
    registry.render()   # the text exposition format, CONTENT_TYPE
"""
from __future__ import annotations

import threading
from typing import Iterable, Sequence

import prometheus_client
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

prometheus_client.disable_created_metrics()  # a `_created` series per counter and histogram tells nothing here

CONTENT_TYPE = CONTENT_TYPE_LATEST
DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Seconds, for what takes up to minutes: a timer's lag, a notification's way to its run's launch."""
RUN_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
"""Seconds a run takes, up to hours."""
SERVICE_LABEL = "service"


class Registry:
    """The metrics of one service (`service` names it) or, unnamed, of the process: its own families,
    its services' registries merged in, and the process collectors."""

    def __init__(self, service: str = "") -> None:
        self.name = service
        self._collectors = CollectorRegistry(auto_describe=False)
        self._metrics: dict[str, tuple[type, tuple[str, ...], object]] = {}
        self._services: dict[str, Registry] = {}
        self._lock = threading.Lock()
        if not service:
            for collector in (ProcessCollector, PlatformCollector, GCCollector):
                collector(registry=self._collectors)

    def service(self, name: str) -> Registry:
        """The registry of the service `name` (the same one each time), merged into this one's exposition."""
        if not name or self.name:
            raise ValueError(f"a service registry belongs to the process's registry, got {name!r} under {self.name!r}")
        with self._lock:
            if name not in self._services:
                self._services[name] = Registry(name)
            return self._services[name]

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        return self._get_or_add(Counter, name, help, labelnames)

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Gauge:
        return self._get_or_add(Gauge, name, help, labelnames)

    def histogram(self, name: str, help: str, labelnames: Sequence[str] = (),
                  buckets: Sequence[float] = DEFAULT_BUCKETS) -> Histogram:
        return self._get_or_add(Histogram, name, help, labelnames, buckets=tuple(buckets))

    def register(self, collector: Collector) -> None:
        """A Collector read at every scrape (state the service holds, counted then)."""
        self._collectors.register(collector)

    def _get_or_add(self, kind: type, name: str, help: str, labelnames: Sequence[str], **extra: object):
        if SERVICE_LABEL in labelnames and self.name:
            raise ValueError(f"{name}: {SERVICE_LABEL!r} is the label a service registry adds itself")
        with self._lock:
            found = self._metrics.get(name)
            if found is None:
                metric = kind(name, help, tuple(labelnames), registry=self._collectors, **extra)
                self._metrics[name] = found = (kind, tuple(labelnames), metric)
            elif found[0] is not kind or found[1] != tuple(labelnames):
                raise ValueError(f"{name} is registered already as a {found[0].__name__.lower()} with labels {found[1]}")
            return found[2]

    def collect(self) -> Iterable[Metric]:
        """This registry's families, and its services' merged in by name with their `service` label."""
        merged: dict[str, Metric] = {}
        with self._lock:
            services = list(self._services.values())
        for labels, families in [({}, self._collectors.collect()),
                                 *(({SERVICE_LABEL: s.name}, s.collect()) for s in services)]:
            for family in families:       # several collectors may report one family (a consumer's lag each)
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                into.samples.extend(sample._replace(labels={**sample.labels, **labels}) for sample in family.samples)
        return list(merged.values())

    def render(self) -> str:
        """The text exposition (CONTENT_TYPE) of `collect()`."""
        return generate_latest(self).decode()  # type: ignore[arg-type]
