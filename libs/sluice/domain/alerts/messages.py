"""What a webhook receives (Slack-compatible JSON with a Sluice section), and when a failed delivery is tried again."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

FIRST_RETRY = timedelta(seconds=10)
MAX_RETRY = timedelta(minutes=15)
GIVE_UP_AFTER = timedelta(hours=24)
"""A delivery not acknowledged (2xx) this long after it was requested is abandoned (WebhookAbandoned)."""


def retry_delay(attempts: int, jitter: float) -> timedelta:
    """Capped exponential backoff with equal jitter: half the step fixed, half drawn (`jitter` in [0, 1)),
    so receivers that failed together are not all retried at the same instant."""
    step = min(MAX_RETRY, FIRST_RETRY * (2 ** min(max(attempts - 1, 0), 20)))
    return step / 2 + step / 2 * min(max(jitter, 0.0), 1.0)


def sla_missed_body(schedule_id: str, schedule_name: str, kind: str, deadline: datetime, job_id: str) -> str:
    what = f"job {job_id} was not completed within its SLA" if job_id else "no run completed by its SLA"
    text = f":warning: Sluice: schedule {schedule_name or schedule_id} missed its SLA ({what}, deadline {_at(deadline)})"
    return _body(text, {"event": "sla_missed", "schedule_id": schedule_id, "schedule_name": schedule_name,
                        "sla": kind, "deadline": _at(deadline), "job_id": job_id, "run_id": ""})


def run_failed_body(schedule_id: str, schedule_name: str, program: str, job_id: str, run_id: str,
                    status: str, at: datetime) -> str:
    text = f":x: Sluice: run {run_id} of {program} (schedule {schedule_name or schedule_id}) ended {status} at {_at(at)}"
    return _body(text, {"event": "run_failed", "schedule_id": schedule_id, "schedule_name": schedule_name,
                        "program": program, "status": status, "job_id": job_id, "run_id": run_id, "at": _at(at)})


def _body(text: str, sluice: dict[str, str]) -> str:
    fields = [{"type": "mrkdwn", "text": f"*{name}*\n{value}"} for name, value in sluice.items() if value]
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": text}},
              {"type": "section", "fields": fields[:10]}]  # Slack takes at most 10 fields per section
    return json.dumps({"text": text, "blocks": blocks, "sluice": sluice}, sort_keys=True)


def _at(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")
