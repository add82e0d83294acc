"""Every trigger kind as pure data, and its pure evaluation for a pending job.

    trigger = OrTrigger((AndTrigger((PartitionTrigger("ns", "a"), PartitionTrigger("ns", "b"))),
                         ElapsedTrigger(6 * 3600)))
    validate_trigger(trigger)                        # InvalidArgument("schedule.trigger....", ...)
    event_keys(trigger)                              # {"partition:ns.a", "partition:ns.b"}
    state = start(trigger, now)
    state = observe(trigger, state, notification, now)   # the same object when nothing changed
    evaluate(trigger, state, now)                    # Evaluation(satisfied, wake_at, logical_time)
    matched_notifications(trigger, state)            # what the program is handed
"""
from sluice.domain.triggers.cron import CronError, latest_fire, next_fire, next_fire_times, nth_latest_fire
from sluice.domain.triggers.evaluation import Evaluation, evaluate
from sluice.domain.triggers.specs import (
    TERMINAL_STATUSES,
    AndTrigger,
    DataSizeTrigger,
    ElapsedTrigger,
    FrozenMap,
    OrTrigger,
    PartitionTrigger,
    ProgramStatusTrigger,
    QuietPeriodTrigger,
    TimeTrigger,
    Trigger,
    event_keys,
    leaves,
    time_alone_can_satisfy,
)
from sluice.domain.triggers.state import LeafState, TriggerState, matched_notifications, observe, start
from sluice.domain.triggers.validation import MAX_DEPTH, validate_trigger

__all__ = [
    "TERMINAL_STATUSES", "MAX_DEPTH",
    "Trigger", "TimeTrigger", "PartitionTrigger", "DataSizeTrigger", "ProgramStatusTrigger",
    "QuietPeriodTrigger", "ElapsedTrigger", "AndTrigger", "OrTrigger", "FrozenMap",
    "validate_trigger", "event_keys", "time_alone_can_satisfy", "leaves",
    "LeafState", "TriggerState", "start", "observe", "matched_notifications",
    "Evaluation", "evaluate",
    "CronError", "next_fire", "next_fire_times", "latest_fire", "nth_latest_fire",
]
