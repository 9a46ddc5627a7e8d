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
