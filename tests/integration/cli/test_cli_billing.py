"""``aicenter billing``: recharge (and its retry), adjust, balance, ledger, verify; a bad amount is a clear error."""

from __future__ import annotations

import json

from tests.integration.cli.conftest import Run


def test_recharge_adjust_balance_ledger_verify(admin_cli: Run) -> None:
    before = json.loads(admin_cli("billing", "balance", "-o", "json").stdout)["balance"]
    r = admin_cli("billing", "recharge", "100.50", "--reason", "top-up", "--key", "cli-1")
    assert r.exit_code == 0, r.output
    assert "Recharge of 100.50 coins recorded" in r.stdout
    assert admin_cli("billing", "recharge", "100.50", "--reason", "top-up", "--key", "cli-1").exit_code == 0
    r = admin_cli("billing", "adjust", "--reason", "fix", "--", "-0.50")
    assert r.exit_code == 0, r.output
    balance = json.loads(admin_cli("billing", "balance", "-o", "json").stdout)["balance"]
    assert float(balance) - float(before) == 100.0
    ledger = admin_cli("billing", "ledger", "--kind", "recharge", "-o", "json")
    assert [e["idempotency_key"] for e in json.loads(ledger.stdout)].count("recharge:cli-1") == 1
    table = admin_cli("billing", "ledger")
    assert "adjustment" in table.stdout
    assert "top-up" in table.stdout
    r = admin_cli("billing", "verify")
    assert r.exit_code == 0, r.output
    assert "equals the formula" in r.stdout


def test_bad_amount_is_a_clear_error(admin_cli: Run) -> None:
    r = admin_cli("billing", "recharge", "1.005", "--reason", "x")
    assert r.exit_code != 0
    assert "amount" in r.output
    assert "2 decimal places" in r.output


def test_policy_set_get_and_shown_with_the_balance(admin_cli: Run) -> None:
    r = admin_cli("billing", "policy", "get")
    assert r.exit_code == 0, r.output
    assert "policy: arrears off; this month 0.00 of no limit; ok" in r.stdout
    r = admin_cli("billing", "policy", "set", "stop", "--grace", "30", "--limit", "500")
    assert r.exit_code == 0, r.output
    assert "arrears stop work after 30 min" in r.stdout
    assert "of 500.00" in r.stdout
    shown = json.loads(admin_cli("billing", "policy", "get", "-o", "json").stdout)
    assert (shown["arrears"], shown["grace_minutes"], shown["monthly_limit"]) == ("stop", 30, "500.00")
    assert "arrears stop work after 30 min" in admin_cli("billing", "balance").stdout
    r = admin_cli("billing", "policy", "set", "sometimes")
    assert r.exit_code != 0
    assert "arrears" in r.output
    assert "off, warn, stop" in r.output
    r = admin_cli("billing", "policy", "set", "off")  # off without a limit: nothing is refused any more
    assert r.exit_code == 0, r.output
    assert "arrears off; this month 0.00 of no limit" in r.stdout


def test_report_csv_stats_and_a_bad_range(admin_cli: Run) -> None:
    r = admin_cli(
        "billing", "report", "--period", "month", "--by", "kind", "--from", "2026-01-01", "--to", "2026-03-01"
    )
    assert r.exit_code == 0, r.output
    assert "Total 2026-01-01 to 2026-03-01 (excluded)" in r.stdout
    r = admin_cli("billing", "report", "--period", "year", "--by", "kind", "--csv")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == "period_start,kind,machine_hours,amount,entries"
    report = json.loads(admin_cli("billing", "report", "--by", "spec", "-o", "json").stdout)
    assert report["group_by"] == "spec"
    assert len(report["buckets"]) == 1  # without a range: the month holding today
    r = admin_cli("billing", "stats", "--period", "week", "--from", "2026-01-05", "--to", "2026-01-19")
    assert r.exit_code == 0, r.output
    assert "users" in r.stdout
    r = admin_cli("billing", "report", "--from", "2026-03-01", "--to", "2026-01-01")
    assert r.exit_code != 0
    assert "to" in r.output
    assert "after from" in r.output
