"""``aicenter billing ...``: a workspace's balance and ledger; recharges, refunds, adjustments and the
reconciliation for platform admins."""

from __future__ import annotations

from itertools import islice
from typing import Annotated

import typer

from aicenter.cli import output as out
from aicenter.cli.common import CliError, Output, OutputOpt, client, workspace_id
from aicenter.client import BillingPolicy

billing_app = typer.Typer(help="Machine-time billing: balances, the ledger, recharges.", no_args_is_help=True)

WorkspaceOpt = Annotated[
    str | None, typer.Option("--workspace", "-w", help="Workspace name or id (default: your current one).")
]
ReasonOpt = Annotated[str, typer.Option("--reason", "-r", help="Why the balance changes (kept in the ledger).")]
KeyOpt = Annotated[
    str | None,
    typer.Option("--key", help="Idempotency key: running the command again with it writes nothing new."),
]

_LEDGER_COLUMNS: list[out.Column] = [
    ("ID", lambda e: e.id),
    ("KIND", lambda e: e.kind),
    ("AMOUNT", lambda e: f"{e.amount:.2f}"),
    ("MACHINE-H", lambda e: f"{e.machine_hours:.6f}" if e.kind == "charge" else ""),
    ("JOB", lambda e: e.job_id or ""),
    (
        "PERIOD",
        lambda e: (
            f"{e.period_start:%Y-%m-%d %H:%M:%S} +{e.period_end - e.period_start}"
            if e.period_start and e.period_end
            else ""
        ),
    ),
    ("REASON", lambda e: e.reason),
    ("BY", lambda e: e.actor_name),
    ("AT", lambda e: e.created_at),
]


@billing_app.command("balance")
def billing_balance(workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """The workspace's balance in coins."""
    with client() as api:
        ws = workspace_id(api, workspace)
        if output is Output.table:  # the policy carries the balance too: one request, as `policy get`
            _print_policy(api.billing_policy(ws))
            return
        balance = api.balance(ws)
    out.show(balance, output)


@billing_app.command("ledger")
def billing_ledger(
    workspace: WorkspaceOpt = None,
    kind: Annotated[str | None, typer.Option(help="charge, recharge, refund or adjustment.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many entries.")] = 50,
    output: OutputOpt = Output.table,
) -> None:
    """The workspace's ledger, newest first: charges per copy and period, recharges, refunds, adjustments."""
    with client() as api:
        entries = list(islice(api.ledger(workspace_id(api, workspace), kind=kind), limit))
    out.show(entries, output, _LEDGER_COLUMNS)


def _post(kind: str, amount: str, reason: str, workspace: str | None, key: str | None, output: Output) -> None:
    with client() as api:
        entry = api.add_ledger_entry(workspace_id(api, workspace), kind, amount, reason, idempotency_key=key)
    if output is Output.table:
        typer.echo(f"{kind.capitalize()} of {entry.amount:.2f} coins recorded (entry {entry.id}).")
    else:
        out.show(entry, output)


@billing_app.command("recharge")
def billing_recharge(
    amount: Annotated[str, typer.Argument(help='Coins, at most 2 decimal places, e.g. "100.50".')],
    reason: ReasonOpt,
    workspace: WorkspaceOpt = None,
    key: KeyOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Credit a workspace (platform admins)."""
    _post("recharge", amount, reason, workspace, key, output)


@billing_app.command("refund")
def billing_refund(
    amount: Annotated[str, typer.Argument(help="Coins, at most 2 decimal places.")],
    reason: ReasonOpt,
    workspace: WorkspaceOpt = None,
    key: KeyOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Give coins back to a workspace, e.g. for work lost to the platform (platform admins)."""
    _post("refund", amount, reason, workspace, key, output)


@billing_app.command("adjust")
def billing_adjust(
    amount: Annotated[str, typer.Argument(help="Signed coins, e.g. -- -2.50 to debit.")],
    reason: ReasonOpt,
    workspace: WorkspaceOpt = None,
    key: KeyOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Correct a workspace's balance up or down (platform admins)."""
    _post("adjustment", amount, reason, workspace, key, output)


@billing_app.command("verify")
def billing_verify(output: OutputOpt = Output.table) -> None:
    """Check that the ledger equals the formula over every closed copy, and every balance its ledger's sum
    (platform admins). Exit code 1 when something differs."""
    with client() as api:
        result = api.verify_billing()
    if output is not Output.table:
        out.show(result, output)
    elif result.ok:
        typer.echo("The ledger equals the formula over every closed copy; every balance equals its ledger.")
    else:
        out.show(
            result.mismatches,
            output,
            [
                ("WHAT", lambda m: m.what),
                ("ID", lambda m: m.id),
                ("EXPECTED", lambda m: m.expected),
                ("RECORDED", lambda m: m.recorded),
            ],
        )
    if not result.ok:
        raise CliError("billing_mismatch", f"{len(result.mismatches)} mismatches", exit_code=1)


policy_app = typer.Typer(
    help="A workspace's billing policy: arrears (off, warn, stop after a grace) and a monthly limit.",
    no_args_is_help=True,
)
billing_app.add_typer(policy_app, name="policy")


def _describe(policy: BillingPolicy) -> str:
    """One line: the policy, this month's spend against the limit, and the phase."""
    if policy.arrears == "stop":
        rule = f"arrears stop work after {policy.grace_minutes} min"
    elif policy.arrears == "warn":
        rule = "arrears warn and refuse new work"
    else:
        rule = "arrears off"
    limit = f"{policy.monthly_limit:.2f}" if policy.monthly_limit is not None else "no limit"
    state = policy.phase
    if policy.phase != "ok" and policy.arrears_since is not None:
        state += f" since {policy.arrears_since:%Y-%m-%d %H:%M} UTC ({policy.cause})"
    return f"policy: {rule}; this month {policy.month_spend:.2f} of {limit}; {state}"


@policy_app.command("get")
def policy_get(workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """Show the workspace's billing policy and whether it is in arrears."""
    with client() as api:
        policy = api.billing_policy(workspace_id(api, workspace))
    if output is Output.table:
        _print_policy(policy)
    else:
        out.show(policy, output)


def _print_policy(policy: BillingPolicy) -> None:
    typer.echo(f"{policy.workspace}: {policy.balance:.2f} coins")
    typer.echo(_describe(policy))


@policy_app.command("set")
def policy_set(
    arrears: Annotated[str, typer.Argument(help="off, warn (refuse new work) or stop (also stop running work).")],
    workspace: WorkspaceOpt = None,
    grace: Annotated[int, typer.Option("--grace", help="Minutes in arrears before work stops (stop).")] = 0,
    limit: Annotated[
        str | None, typer.Option("--limit", help='Coins per calendar month (UTC), e.g. "500"; omit for none.')
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Set the workspace's billing policy (platform admins). A workspace with a policy (not off, or a limit) is
    refused new work while its balance is not positive or its month's charges reach the limit."""
    with client() as api:
        policy = api.set_billing_policy(workspace_id(api, workspace), arrears, grace_minutes=grace, monthly_limit=limit)
    if output is Output.table:
        typer.echo(_describe(policy))
    else:
        out.show(policy, output)


PeriodOpt = Annotated[str, typer.Option("--period", "-p", help="week, month or year (UTC; weeks start Monday).")]
FromOpt = Annotated[str | None, typer.Option("--from", help="First day, YYYY-MM-DD (with --to).")]
ToOpt = Annotated[str | None, typer.Option("--to", help="First day after the range, YYYY-MM-DD (with --from).")]
AnchorOpt = Annotated[
    str | None, typer.Option("--anchor", help="Without --from/--to: the period holding this day (default today).")
]


@billing_app.command("report")
def billing_report(
    period: PeriodOpt = "month",
    by: Annotated[str, typer.Option("--by", help="workspace, user, spec, gpu_type or kind.")] = "workspace",
    start: FromOpt = None,
    end: ToOpt = None,
    anchor: AnchorOpt = None,
    workspace: Annotated[
        str | None, typer.Option("--workspace", "-w", help="Only this workspace (default: all you see).")
    ] = None,
    csv: Annotated[bool, typer.Option("--csv", help="Print CSV (one line per period and group).")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Machine-hours and spend per period and group, of the workspaces you are a member of (admins: all)."""
    with client() as api:
        ws = workspace_id(api, workspace) if workspace else None
        if csv:
            text = api.billing_report_csv(
                period=period, group_by=by, start=start, end=end, anchor=anchor, workspace_id=ws
            )
            typer.echo(text, nl=False)
            return
        report = api.billing_report(period=period, group_by=by, start=start, end=end, anchor=anchor, workspace_id=ws)
    if output is not Output.table:
        out.show(report, output)
        return
    out.show(
        report.rows,
        output,
        [
            (period.upper(), lambda r: r.bucket),
            (by.upper(), lambda r: r.group),
            ("MACHINE-H", lambda r: f"{r.machine_hours:.6f}"),
            ("AMOUNT", lambda r: f"{r.amount:.2f}"),
        ],
    )
    typer.echo(
        f"Total {report.start} to {report.end} (excluded): {report.machine_hours:.6f} machine-hours, "
        f"{report.amount:.2f} coins."
    )


@billing_app.command("stats")
def billing_stats(
    period: PeriodOpt = "month",
    start: FromOpt = None,
    end: ToOpt = None,
    anchor: AnchorOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The platform statistics summary (platform admins): users, workspaces, jobs, machine-hours per
    accelerator type and period."""
    with client() as api:
        stats = api.billing_stats(period=period, start=start, end=end, anchor=anchor)
    if output is not Output.table:
        out.show(stats, output)
        return
    typer.echo(
        f"{stats.start} to {stats.end} (excluded): {stats.users} users, {stats.workspaces} workspaces "
        f"({stats.active_workspaces} charged), {stats.jobs} jobs ran, {stats.machine_hours:.6f} machine-hours, "
        f"{stats.amount:.2f} coins."
    )
    out.show(
        [(b, {t: series[i] for t, series in stats.hours_by_gpu_type.items()}) for i, b in enumerate(stats.buckets)],
        output,
        [(period.upper(), lambda x: x[0])]
        + [(t or "(none)", lambda x, t=t: f"{x[1][t]:.2f}") for t in stats.hours_by_gpu_type],  # type: ignore[misc]
    )
