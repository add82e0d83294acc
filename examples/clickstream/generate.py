"""Realistic clickstream partitions for a website experimentation service (pure stdlib).

Every marketplace is partitioned by its own *local* date and hour: JP hour 09 on 2026-11-22
covers 00:00-01:00 UTC. One partition is one JSON-lines file:

    <data_dir>/<namespace>/clickstream/marketplace=JP/date=2026-11-22/hour=09/part-00000.json

Events come from simulated sessions walking a funnel (view -> click -> add_to_cart -> purchase),
so every partition satisfies views >= clicks >= add_to_carts >= purchases. Users are split
between two experiments and into buckets A/B by a stable hash; bucket B converts a little better.
The same seed always produces byte-identical files.

    python -m sluice_examples.clickstream.generate --data-dir D --marketplace US --date 2026-11-22 --hour 9 --rows 2000
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
from collections.abc import Iterable, Sequence
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

MARKETPLACES = {"US": "America/New_York", "UK": "Europe/London", "JP": "Asia/Tokyo"}
CURRENCIES = {"US": "USD", "UK": "GBP", "JP": "JPY"}
DATASET = "clickstream"
EXPERIMENTS = ("exp-42", "exp-57")
FILE_NAME = "part-00000.json"

CLICK_RATE = 0.30                        # per view
CART_RATE = 0.22                         # per click
PURCHASE_RATE = {"A": 0.35, "B": 0.42}   # per add_to_cart: the treatment (B) converts better
LATENCY_MS = {"view": 120, "click": 90, "add_to_cart": 180, "purchase": 450}   # medians
REGION_SLOWDOWN = {"US": 1.0, "UK": 1.15, "JP": 1.4}                        # served from the US
ORDER_VALUE = {"USD": 45.0, "GBP": 38.0, "JPY": 5200.0}                        # median basket
VIEW_PAGES = ("/", "/search", "/deals", "/product")


def hours_for(marketplace: str, local_date: date | str, hours: Iterable[int] = range(24)) -> list[datetime]:
    """The aware local start of each of `hours` on `local_date` in the marketplace's zone.

    Hours that do not exist locally (spring-forward gap) are left out; a repeated hour
    (fall-back) is given once, as its first occurrence: both share one partition key."""
    zone = _zone(marketplace)
    day = date.fromisoformat(local_date) if isinstance(local_date, str) else local_date
    result = []
    for hour in hours:
        wall = datetime.combine(day, time(hour))
        start = wall.replace(tzinfo=zone)
        if start.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None) == wall:
            result.append(start)
    return result


def partition_key(marketplace: str, local_hour: datetime) -> dict[str, str]:
    local = _local_start(marketplace, local_hour)
    return {"marketplace": marketplace, "date": local.date().isoformat(), "hour": f"{local.hour:02d}"}


def generate_hour(data_dir: str | Path, namespace: str, marketplace: str, local_hour: datetime,
                  rows: int, seed: int) -> dict:
    """Write one partition (the hour starting at aware `local_hour`) and return it as a
    partition dict: {key, location, size_bytes, record_count, metadata}."""
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    start = _local_start(marketplace, local_hour)
    key = partition_key(marketplace, start)
    location = Path(data_dir).resolve() / namespace / DATASET / "/".join(f"{k}={v}" for k, v in key.items())
    rng = random.Random(f"{seed}:{marketplace}:{start.isoformat()}")
    lines = [json.dumps(e, separators=(",", ":")) + "\n" for e in _events(rng, marketplace, start, rows)]
    location.mkdir(parents=True, exist_ok=True)
    target = location / FILE_NAME
    tmp = location / f".{FILE_NAME}.tmp"
    tmp.write_text("".join(lines), encoding="utf-8")
    os.replace(tmp, target)
    return {
        "key": key,
        "location": str(location),
        "size_bytes": target.stat().st_size,
        "record_count": len(lines),
        "metadata": {
            "format": "json", "time_zone": MARKETPLACES[marketplace],
            "start_utc": start.astimezone(timezone.utc).isoformat(), "seed": str(seed),
            "generator": "sluice_examples.clickstream.generate",
        },
    }


def assignment(user_id: str) -> tuple[str, str]:
    """(experiment_id, bucket) of a user: a stable hash, the same in every hour and process."""
    experiment = EXPERIMENTS[_hash(user_id) % len(EXPERIMENTS)]
    return experiment, "AB"[_hash(f"{experiment}:{user_id}") % 2]


def _events(rng: random.Random, marketplace: str, start: datetime, rows: int) -> list[dict]:
    # Arithmetic in UTC: aware datetimes in a ZoneInfo zone add wall-clock time, wrong across DST.
    zone, currency = start.tzinfo, CURRENCIES[marketplace]
    start = start.astimezone(timezone.utc)
    end = start + timedelta(hours=1)
    pool = max(20, rows // 5)             # distinct users seen in the hour, skewed to heavy users
    events: list[tuple[datetime, dict]] = []
    while len(events) < rows:
        user = f"{marketplace.lower()}-u{int(pool * rng.random() ** 1.7):06d}"
        experiment, bucket = assignment(user)
        session = f"s-{rng.getrandbits(48):012x}"
        clock = [start + timedelta(milliseconds=rng.randrange(3_600_000))]

        def emit(event_type: str, page: str) -> bool:
            """Append one event of this session; False when the partition is full or the hour is over."""
            if len(events) >= rows or clock[0] >= end:
                return False
            median = LATENCY_MS[event_type] * REGION_SLOWDOWN[marketplace]
            revenue = None
            if event_type == "purchase":
                revenue = round(rng.lognormvariate(math.log(ORDER_VALUE[currency]), 0.6), 0 if currency == "JPY" else 2)
            events.append((clock[0], {
                "event_time": clock[0].astimezone(zone).isoformat(timespec="milliseconds"),
                "user_id": user, "session_id": session, "page": page, "event_type": event_type,
                "experiment_id": experiment, "bucket": bucket,
                "latency_ms": max(5, int(rng.lognormvariate(math.log(median), 0.45))),
                "revenue": revenue, "marketplace": marketplace, "currency": currency,
            }))
            clock[0] += timedelta(milliseconds=int(rng.expovariate(1 / 20_000)) + 200)
            return True

        for _ in range(1 + int(rng.expovariate(1 / 3))):       # about four page views a session
            product = f"/product/p{rng.randint(1, 800):04d}"
            page = rng.choice(VIEW_PAGES)
            if not emit("view", product if page == "/product" else page):
                break
            if rng.random() < CLICK_RATE:
                if not emit("click", product):
                    break
                if rng.random() < CART_RATE:
                    if not emit("add_to_cart", "/cart"):
                        break
                    if rng.random() < PURCHASE_RATE[bucket] and not emit("purchase", "/checkout/confirmation"):
                        break
    events.sort(key=lambda e: e[0])   # stable: ties keep session order
    return [event for _, event in events]


def _local_start(marketplace: str, local_hour: datetime) -> datetime:
    if local_hour.tzinfo is None or local_hour.utcoffset() is None:
        raise ValueError(f"local_hour must be timezone-aware, got {local_hour!r}")
    local = local_hour.astimezone(_zone(marketplace))
    if (local.minute, local.second, local.microsecond) != (0, 0, 0):
        raise ValueError(f"local_hour must start an hour, got {local.isoformat()}")
    return local


def _zone(marketplace: str) -> ZoneInfo:
    if marketplace not in MARKETPLACES:
        raise ValueError(f"unknown marketplace {marketplace!r}; known: {', '.join(MARKETPLACES)}")
    return ZoneInfo(MARKETPLACES[marketplace])


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write clickstream partitions; print each as JSON.")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--namespace", default="experiments")
    parser.add_argument("--marketplace", required=True, choices=sorted(MARKETPLACES))
    parser.add_argument("--date", required=True, type=date.fromisoformat, help="local date, YYYY-MM-DD")
    parser.add_argument("--hour", required=True, type=int, nargs="+", choices=range(24), metavar="HOUR",
                        help="local hour(s), 0-23")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    starts = {s.hour: s for s in hours_for(args.marketplace, args.date, args.hour)}
    for hour in args.hour:
        if hour not in starts:
            print(f"skipped hour {hour:02d}: it does not exist on {args.date} in {MARKETPLACES[args.marketplace]}",
                  file=sys.stderr)
            continue
        partition = generate_hour(args.data_dir, args.namespace, args.marketplace, starts[hour], args.rows, args.seed)
        print(json.dumps(partition))
    return 0


if __name__ == "__main__":
    sys.exit(main())
