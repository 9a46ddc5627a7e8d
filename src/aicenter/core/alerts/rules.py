"""The built-in alert rules and silence matching.

Built-in rules are seeded into ``alert_rules`` (by name) when the evaluator first runs; admins may disable or
retune them but not delete them, so a fresh platform alerts on the usual failures with no set-up. Their facts
(``node.up``, ``job.failed``, ...) are computed by services/alerts from the platform's tables; the ``node.*`` and
``accelerator.*`` metrics are the samplers' series (MONITORING.md names them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aicenter.core.alerts.decide import Severity

__all__ = ["BUILTIN_RULES", "FACTS", "BuiltinRule", "silence_matches"]


@dataclass(frozen=True)
class BuiltinRule:
    name: str
    expression: str
    for_s: int
    severity: Severity
    description: str


# Facts the platform computes from its own tables each evaluation (services/alerts/_facts.py), by name.
FACTS: dict[str, str] = {
    "node.up": "1 for a ready node, 0 for one that is not ready (its heartbeat stopped); labels node",
    "node.heartbeat_age_seconds": "seconds since the node's last heartbeat (nodes that heartbeat); labels node",
    "job.failed": "1 per job that failed in the last hour; labels job, job_name, workspace",
    "job.pending_seconds": "seconds each queued or pending job has waited; labels job, job_name, workspace",
    "quota.used_ratio": "used / maximum per workspace, pool and resource with a maximum; labels workspace, pool, "
    "resource",
    "accelerator.allocated_utilization": "accelerator.utilization of devices a running replica holds; labels "
    "node, device, type, job",
    "billing.balance_ratio": "balance / monthly budget per workspace; no values until billing exists",
}

BUILTIN_RULES: tuple[BuiltinRule, ...] = (
    BuiltinRule(
        "node-down",
        "node.up == 0",
        0,
        Severity.CRITICAL,
        "A node is not ready: its heartbeat stopped for longer than AICENTER_NODE_LOST_AFTER_S, or its engine lost it.",
    ),
    # 30 minutes: short enough to catch a forgotten notebook within a working hour, long enough that data
    # loading or a checkpoint (minutes of zero utilization) does not page.
    BuiltinRule(
        "accelerator-idle",
        "accelerator.allocated_utilization < 0.05",
        1800,
        Severity.WARNING,
        "An accelerator allocated to a running job has been under 5% utilized for 30 minutes.",
    ),
    # 85 °C: NVIDIA data-centre GPUs slow their clocks from about 87-90 °C.
    BuiltinRule(
        "accelerator-hot",
        "accelerator.temperature_celsius > 85",
        300,
        Severity.WARNING,
        "An accelerator has been above 85 °C for 5 minutes.",
    ),
    BuiltinRule(
        "disk-nearly-full",
        "node.disk_used_bytes / node.disk_total_bytes > 0.9",
        300,
        Severity.WARNING,
        "A node's disk has been more than 90% full for 5 minutes.",
    ),
    BuiltinRule("job-failed", "job.failed > 0", 0, Severity.WARNING, "A job failed (shown for an hour)."),
    BuiltinRule(
        "job-pending-long",
        "job.pending_seconds > 3600",
        0,
        Severity.INFO,
        "A job has waited for more than an hour to be scheduled.",
    ),
    BuiltinRule(
        "quota-nearly-used",
        "quota.used_ratio > 0.9",
        600,
        Severity.INFO,
        "A workspace has used more than 90% of a quota maximum for 10 minutes.",
    ),
    BuiltinRule(
        "balance-low",
        "billing.balance_ratio < 0.1",
        0,
        Severity.WARNING,
        "A workspace's balance is under 10% of its budget. Evaluates to nothing until billing lands.",
    ),
)


def silence_matches(matchers: Mapping[str, object], labels: Mapping[str, str], rule_name: str) -> bool:
    """Whether a silence's matchers all hold: each key equals the alert's label, ``rule`` the rule's name.

    An empty matcher set matches nothing: a silence must say what it silences (a typo must not mute all).
    """
    if not matchers:
        return False
    for key, value in matchers.items():
        actual = rule_name if key == "rule" else labels.get(key)
        if actual != str(value):
            return False
    return True
