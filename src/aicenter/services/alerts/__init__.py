"""Alerts and the cluster event log: rules, silences, channels, evaluation, delivery and events.

Inventory and jobs call :func:`record_event`; the alert controllers call :func:`evaluate_rules` and
:func:`deliver_due`; the API and console call the rest.
"""

from aicenter.services.alerts._alerts import AlertView, list_alerts
from aicenter.services.alerts._config import (
    check_target,
    create_channel,
    create_rule,
    create_silence,
    delete_channel,
    delete_rule,
    expire_silence,
    get_channel,
    get_rule,
    list_channels,
    list_rules,
    list_silences,
    seed_builtin_rules,
    update_channel,
    update_rule,
)
from aicenter.services.alerts._delivery import ChannelTest, backoff_s, deliver_due, next_due_in_s, send, test_channel
from aicenter.services.alerts._evaluate import EvaluationResult, evaluate_rules, payload
from aicenter.services.alerts._events import list_events, record_event, visible_to
from aicenter.services.alerts._facts import EXTRA_FACTS, JOB_FAILED_WINDOW_S, FactSource, SeriesReader, gather_facts

__all__ = [
    "EXTRA_FACTS",
    "JOB_FAILED_WINDOW_S",
    "AlertView",
    "ChannelTest",
    "EvaluationResult",
    "FactSource",
    "SeriesReader",
    "backoff_s",
    "check_target",
    "create_channel",
    "create_rule",
    "create_silence",
    "delete_channel",
    "delete_rule",
    "deliver_due",
    "evaluate_rules",
    "expire_silence",
    "gather_facts",
    "get_channel",
    "get_rule",
    "list_alerts",
    "list_channels",
    "list_events",
    "list_rules",
    "list_silences",
    "next_due_in_s",
    "payload",
    "record_event",
    "seed_builtin_rules",
    "send",
    "test_channel",
    "update_channel",
    "update_rule",
    "visible_to",
]
