"""A small metrics registry rendered in the Prometheus text exposition format 0.0.4.

Counters, gauges and histograms (fixed buckets) with labels. Nothing here is global: the
composition root creates a `Registry` and passes it to whatever it instruments. Asking a registry
twice for the same metric returns the same metric, so several consumers can share one series family.

    registry = Registry()
    handled = registry.counter("sluice_consumer_messages_total", "Messages handled.", ("topic", "group"))
    handled.labels(topic="sluice.jobs", group="launcher").inc()
    registry.render()  # text/plain; version=0.0.4
"""
from __future__ import annotations

import math
import re
import threading
from bisect import bisect_left
from typing import Iterator, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label_text(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values)) + "}"


class _CounterChild:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up, got inc({amount})")
        self.value += amount


class _GaugeChild:
    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class _HistogramChild:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class Metric:
    """A family of series with the same name and label names; `labels(...)` picks (or makes) one."""

    kind = "untyped"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        if not _METRIC_NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} for {name}")
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], object] = {}
        self._lock = threading.Lock()

    def labels(self, *values: object, **named: object):
        if named:
            if values or set(named) != set(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(named)}")
            values = tuple(named[n] for n in self.labelnames)
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {len(values)} values")
        key = tuple(str(v) for v in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._new_child()
        return child

    def _new_child(self) -> object:
        raise NotImplementedError

    def _series(self) -> list[tuple[tuple[str, ...], object]]:
        with self._lock:
            return sorted(self._children.items())

    def samples(self) -> Iterator[str]:
        for values, child in self._series():
            yield f"{self.name}{_label_text(self.labelnames, values)} {format_value(child.value)}"

    def render(self) -> str:
        lines = [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.kind}", *self.samples()]
        return "\n".join(lines) + "\n"


class Counter(Metric):
    kind = "counter"

    def _new_child(self) -> _CounterChild:
        return _CounterChild()

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)


class Gauge(Metric):
    kind = "gauge"

    def _new_child(self) -> _GaugeChild:
        return _GaugeChild()

    def set(self, value: float) -> None:
        self.labels().set(value)


class Histogram(Metric):
    kind = "histogram"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = (),
                 buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        super().__init__(name, help, labelnames)
        if "le" in self.labelnames:
            raise ValueError(f"{name}: 'le' is reserved for histogram buckets")
        bounds = tuple(sorted(float(b) for b in buckets if not math.isinf(b)))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be distinct and not empty, got {tuple(buckets)}")
        self.buckets = bounds

    def _new_child(self) -> _HistogramChild:
        return _HistogramChild(self.buckets)

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def samples(self) -> Iterator[str]:
        names = (*self.labelnames, "le")
        for values, child in self._series():
            cumulative = 0
            for bound, count in zip((*child.bounds, math.inf), child.counts):
                cumulative += count
                le = "+Inf" if math.isinf(bound) else repr(bound)
                yield f"{self.name}_bucket{_label_text(names, (*values, le))} {cumulative}"
            labels = _label_text(self.labelnames, values)
            yield f"{self.name}_sum{labels} {format_value(child.sum)}"
            yield f"{self.name}_count{labels} {cumulative}"


class Registry:
    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}
        self._lock = threading.Lock()

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        return self._get_or_add(Counter, name, help, labelnames)

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Gauge:
        return self._get_or_add(Gauge, name, help, labelnames)

    def histogram(self, name: str, help: str, labelnames: Sequence[str] = (),
                  buckets: Sequence[float] = DEFAULT_BUCKETS) -> Histogram:
        return self._get_or_add(Histogram, name, help, labelnames, buckets=buckets)

    def _get_or_add(self, kind: type, name: str, help: str, labelnames: Sequence[str], **extra: object):
        with self._lock:
            existing = self._metrics.get(name)
            if existing is None:
                self._metrics[name] = existing = kind(name, help, labelnames, **extra)
            elif type(existing) is not kind or existing.labelnames != tuple(labelnames):
                raise ValueError(f"{name} is registered already as a {existing.kind} with labels {existing.labelnames}")
            return existing

    def render(self) -> str:
        with self._lock:
            metrics = sorted(self._metrics.values(), key=lambda m: m.name)
        return "".join(metric.render() for metric in metrics)
