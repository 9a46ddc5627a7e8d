"""Alert transitions with ``for`` durations, flapping, resolution and re-firing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aicenter.core.alerts import Action, AlertState, Current, decide, fingerprint, silence_matches

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _actions(decisions):
    return {d.fingerprint: d.action for d in decisions}


def test_new_condition_fires_at_once_without_for() -> None:
    assert _actions(decide({"a"}, {}, for_s=0, now=NOW)) == {"a": Action.FIRE}


def test_new_condition_waits_for_its_duration() -> None:
    assert _actions(decide({"a"}, {}, for_s=60, now=NOW)) == {"a": Action.PEND}
    pending = {"a": Current(AlertState.PENDING, NOW)}
    assert _actions(decide({"a"}, pending, for_s=60, now=NOW + timedelta(seconds=59))) == {"a": Action.KEEP}
    assert _actions(decide({"a"}, pending, for_s=60, now=NOW + timedelta(seconds=60))) == {"a": Action.FIRE}


def test_pending_condition_that_stops_is_dropped_silently() -> None:
    pending = {"a": Current(AlertState.PENDING, NOW)}
    assert _actions(decide(set(), pending, for_s=60, now=NOW)) == {"a": Action.DROP}


def test_firing_keeps_then_resolves() -> None:
    firing = {"a": Current(AlertState.FIRING, NOW)}
    assert _actions(decide({"a"}, firing, for_s=0, now=NOW)) == {"a": Action.KEEP}
    assert _actions(decide(set(), firing, for_s=0, now=NOW)) == {"a": Action.RESOLVE}


def test_resolved_rows_are_left_alone_and_fire_again_when_the_condition_returns() -> None:
    resolved = {"a": Current(AlertState.RESOLVED, None)}
    assert decide(set(), resolved, for_s=0, now=NOW) == []
    assert _actions(decide({"a"}, resolved, for_s=0, now=NOW)) == {"a": Action.FIRE}
    assert _actions(decide({"a"}, resolved, for_s=30, now=NOW)) == {"a": Action.PEND}


def test_fingerprint_is_order_independent_and_distinct() -> None:
    assert fingerprint({"a": "1", "b": "2"}) == fingerprint({"b": "2", "a": "1"})
    assert fingerprint({"a": "1"}) != fingerprint({"a": "2"})
    assert len(fingerprint({})) == 32


def test_silence_matchers() -> None:
    labels = {"node": "n1", "device": "0"}
    assert silence_matches({"node": "n1"}, labels, "accelerator-hot")
    assert silence_matches({"rule": "accelerator-hot", "node": "n1"}, labels, "accelerator-hot")
    assert not silence_matches({"rule": "node-down"}, labels, "accelerator-hot")
    assert not silence_matches({"node": "n2"}, labels, "accelerator-hot")
    assert not silence_matches({}, labels, "accelerator-hot")
