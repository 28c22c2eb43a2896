"""The /metrics scrape: the counters every process records in Redis
(infra.metrics, which explains why they live there) and a count of jobs from the
database, rendered in Prometheus's exposition format."""

from __future__ import annotations

import json
import time

from django.conf import settings
from django.db.models import Count
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from infra.metrics import METRICS, PREFIX, Metric, key_of
from infra.client import redis_client
from jobs.models import Job
from monitoring import schedule


class RedisCollector:
    """Turns the Redis hashes (and a database count) into prometheus_client families."""

    def collect(self):
        client = redis_client()
        for metric in METRICS.values():
            if metric.name == "vigil_jobs":
                yield self._jobs(GaugeMetricFamily(metric.name, metric.help, labels=metric.labels))
            elif metric.name == "vigil_log_viewers":
                family = GaugeMetricFamily(metric.name, metric.help)
                keys = list(client.scan_iter(match=f"{PREFIX}viewers:*", count=200))
                family.add_metric([], sum(int(v) for v in client.mget(keys) if v is not None) if keys else 0)
                yield family
            elif metric.name == "vigil_monitor_last_sweep_age_seconds":
                family = GaugeMetricFamily(metric.name, metric.help)
                # The stalest shard's: one shard nobody sweeps is jobs nobody watches.
                lasts = [
                    float(v)
                    for v in client.mget([f"{PREFIX}last-sweep:{shard}" for shard in range(settings.MONITOR_SHARDS)])
                    if v is not None
                ]
                if lasts:
                    family.add_metric([], max(0.0, time.time() - min(lasts)))
                yield family
            elif metric.name == "vigil_monitor_quiet_seconds":
                family = GaugeMetricFamily(metric.name, metric.help)
                family.add_metric([], schedule.quiet_seconds() * max(schedule.stretches().values(), default=1.0))
                yield family
            elif metric.kind == "counter":
                family = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
                for field, value in sorted(client.hgetall(key_of("c", metric.name)).items()):
                    family.add_metric(json.loads(field), float(value))
                yield family
            elif metric.kind == "histogram":
                yield self._histogram(
                    metric,
                    client.hgetall(key_of("h", metric.name)),
                    HistogramMetricFamily(metric.name, metric.help, labels=metric.labels),
                )

    @staticmethod
    def _jobs(family):
        rows = Job.objects.values_list("workspace__slug", "status").annotate(n=Count("pk")).order_by()
        for slug, status, n in rows:
            family.add_metric([slug or "", status], n)
        return family

    @staticmethod
    def _histogram(metric: Metric, raw: dict, family):
        series: dict[str, dict[str, float]] = {}
        for key, value in raw.items():
            field, part = json.loads(key)
            series.setdefault(field, {})[part] = float(value)
        for field, parts in sorted(series.items()):
            running, buckets = 0.0, []
            for bound in [str(b) for b in metric.buckets] + ["+Inf"]:
                running += parts.get(bound, 0.0)
                buckets.append((bound, running))
            family.add_metric(json.loads(field), buckets, parts.get("sum", 0.0))
        return family


def render() -> tuple[bytes, str]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector())
    return generate_latest(registry), CONTENT_TYPE_LATEST
