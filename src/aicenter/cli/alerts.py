"""``aicenter alert ...`` (alerts, rules, silences, channels) and ``aicenter events``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

import typer

from aicenter.cli import output as out
from aicenter.cli.common import CliError, Output, OutputOpt, client, invalid, pairs, pick, workspace_id

if TYPE_CHECKING:
    from aicenter.client import Client

alert_app = typer.Typer(help="Alerts, alert rules, silences and notification channels.", no_args_is_help=True)

_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

WorkspaceOpt = Annotated[
    str | None,
    typer.Option("--workspace", "-w", help="A workspace's (name or id; its admins); default: platform-wide (admins)."),
]


def duration_s(value: str, option: str) -> int:
    """``90``, ``90s``, ``5m``, ``2h`` or ``1d`` in seconds."""
    match = _DURATION.match(value.strip())
    if not match:
        raise invalid(option, f"expected a duration such as 300, 5m, 2h or 1d, got {value!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _scope(api: Client, workspace: str | None) -> int | None:
    return workspace_id(api, workspace) if workspace else None


_ALERT_COLUMNS: list[out.Column] = [
    ("ID", lambda a: a.id),
    ("STATE", lambda a: a.state),
    ("SEVERITY", lambda a: a.severity),
    ("RULE", lambda a: a.rule),
    ("LABELS", lambda a: out.labels(a.labels)),
    ("VALUE", lambda a: "" if a.value is None else f"{a.value:.4g}"),
    ("SINCE", lambda a: a.started_at),
]
_RULE_COLUMNS: list[out.Column] = [
    ("ID", lambda r: r.id),
    ("NAME", lambda r: r.name),
    ("SCOPE", lambda r: "platform" if r.workspace_id is None else f"workspace {r.workspace_id}"),
    ("ENABLED", lambda r: "yes" if r.enabled else "no"),
    ("SEVERITY", lambda r: r.severity),
    ("FOR", lambda r: f"{r.for_s}s"),
    ("EXPRESSION", lambda r: r.expression),
]
_SILENCE_COLUMNS: list[out.Column] = [
    ("ID", lambda s: s.id),
    ("MATCHERS", lambda s: out.labels(s.matchers)),
    ("UNTIL", lambda s: s.ends_at),
    ("BY", lambda s: s.created_by_name),
    ("COMMENT", lambda s: s.comment),
]
_CHANNEL_COLUMNS: list[out.Column] = [
    ("ID", lambda c: c.id),
    ("NAME", lambda c: c.name),
    ("KIND", lambda c: c.kind),
    ("SCOPE", lambda c: "platform" if c.workspace_id is None else f"workspace {c.workspace_id}"),
    ("ENABLED", lambda c: "yes" if c.enabled else "no"),
    ("TARGET", lambda c: c.target),
]
_EVENT_COLUMNS: list[out.Column] = [
    ("AT", lambda e: e.at),
    ("KIND", lambda e: e.kind),
    ("SEVERITY", lambda e: e.severity),
    ("MESSAGE", lambda e: e.message),
]


@alert_app.command("list")
def alert_list(
    state: Annotated[str | None, typer.Option(help="pending, firing or resolved.")] = "firing",
    all_states: Annotated[bool, typer.Option("--all", help="Every state (overrides --state).")] = False,
    limit: Annotated[int, typer.Option(min=1, max=500, help="Show at most this many.")] = 50,
    output: OutputOpt = Output.table,
) -> None:
    """Alerts you can see (default: firing ones), newest first."""
    with client() as api:
        page = api.list_alerts_page(state=None if all_states else state, limit=limit)
    out.show(page.items, output, _ALERT_COLUMNS)


@alert_app.command("rules")
def alert_rules(output: OutputOpt = Output.table) -> None:
    """Platform rules (built in and admins') and your workspaces' rules."""
    with client() as api:
        rules = api.list_alert_rules()
    out.show(rules, output, _RULE_COLUMNS)


@alert_app.command("rule-add")
def alert_rule_add(
    name: Annotated[str, typer.Argument(help="The rule's name, e.g. gpu-hot.")],
    expression: Annotated[str, typer.Argument(help="e.g. 'accelerator.temperature_celsius > 85'.")],
    for_: Annotated[str, typer.Option("--for", help="How long the condition must hold, e.g. 5m.")] = "0",
    severity: Annotated[str, typer.Option(help="info, warning or critical.")] = "warning",
    description: Annotated[str, typer.Option(help="What it means and what to do.")] = "",
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Add an alert rule."""
    for_s = duration_s(for_, "--for")
    with client() as api:
        rule = api.create_alert_rule(
            name,
            expression,
            for_s=for_s,
            severity=severity,
            description=description,
            workspace_id=_scope(api, workspace),
        )
    out.show(rule, output, _RULE_COLUMNS)


def _rule_id(api: Client, ref: str) -> int:
    return pick("alert rule", ref, api.list_alert_rules(), lambda r: r.name, lambda r: r.id).id


@alert_app.command("rule-enable")
def alert_rule_enable(
    rule: Annotated[str, typer.Argument(help="Rule name or id.")], output: OutputOpt = Output.table
) -> None:
    """Evaluate the rule again."""
    with client() as api:
        out.show(api.update_alert_rule(_rule_id(api, rule), enabled=True), output, _RULE_COLUMNS)


@alert_app.command("rule-disable")
def alert_rule_disable(
    rule: Annotated[str, typer.Argument(help="Rule name or id.")], output: OutputOpt = Output.table
) -> None:
    """Stop evaluating the rule (built-in ones too); its firing alerts resolve."""
    with client() as api:
        out.show(api.update_alert_rule(_rule_id(api, rule), enabled=False), output, _RULE_COLUMNS)


@alert_app.command("rule-delete")
def alert_rule_delete(
    rule: Annotated[str, typer.Argument(help="Rule name or id.")], output: OutputOpt = Output.table
) -> None:
    """Delete a rule you added (built-in rules are disabled instead)."""
    with client() as api:
        api.delete_alert_rule(_rule_id(api, rule))
    out.done(f"Deleted alert rule {rule!r}.", output)


@alert_app.command("silence")
def alert_silence(
    matchers: Annotated[list[str], typer.Argument(help="LABEL=VALUE pairs; rule=NAME matches a rule.")],
    for_: Annotated[str, typer.Option("--for", help="How long, e.g. 2h.")] = "1h",
    comment: Annotated[str, typer.Option(help="Why.")] = "",
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Mute notifications of matching alerts for a while (alerts still show)."""
    wanted = pairs(matchers, "MATCHERS")
    seconds = duration_s(for_, "--for")
    with client() as api:
        silence = api.create_silence(wanted, duration_s=seconds, comment=comment, workspace_id=_scope(api, workspace))
    out.show(silence, output, _SILENCE_COLUMNS)


@alert_app.command("silences")
def alert_silences(
    all_: Annotated[bool, typer.Option("--all", help="Expired ones too.")] = False, output: OutputOpt = Output.table
) -> None:
    """Active silences you can see."""
    with client() as api:
        out.show(api.list_silences(include_expired=all_), output, _SILENCE_COLUMNS)


@alert_app.command("unsilence")
def alert_unsilence(
    silence: Annotated[int, typer.Argument(help="Silence id.")], output: OutputOpt = Output.table
) -> None:
    """End a silence now."""
    with client() as api:
        out.show(api.expire_silence(silence), output, _SILENCE_COLUMNS)


@alert_app.command("channels")
def alert_channels(output: OutputOpt = Output.table) -> None:
    """Notification channels you administer."""
    with client() as api:
        out.show(api.list_alert_channels(), output, _CHANNEL_COLUMNS)


@alert_app.command("channel-add")
def alert_channel_add(
    name: Annotated[str, typer.Argument(help="The channel's name, e.g. ops-mail.")],
    webhook: Annotated[str | None, typer.Option(help="POST each alert as JSON to this http(s) URL.")] = None,
    email: Annotated[str | None, typer.Option(help="Mail each alert to this address (AICENTER_SMTP_HOST).")] = None,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Add a webhook or e-mail channel."""
    if (webhook is None) == (email is None):
        raise invalid("--webhook/--email", "give exactly one of --webhook URL or --email ADDRESS")
    kind, target = ("webhook", webhook) if webhook is not None else ("email", email)
    assert target is not None
    with client() as api:
        channel = api.create_alert_channel(name, kind, target, workspace_id=_scope(api, workspace))
    out.show(channel, output, _CHANNEL_COLUMNS)


@alert_app.command("test")
def alert_test(
    channel: Annotated[str, typer.Argument(help="Channel name or id.")], output: OutputOpt = Output.table
) -> None:
    """Send a test message to a channel now and say whether it arrived."""
    with client() as api:
        found = pick("alert channel", channel, api.list_alert_channels(), lambda c: c.name, lambda c: c.id)
        result = api.test_alert_channel(found.id)
    if output is not Output.table:
        out.show(result, output)
        return
    if not result.ok:
        raise CliError("delivery_failed", f"channel {found.name}: {result.error}")
    typer.echo(f"Test message delivered to {found.name} ({found.kind} {found.target}).")


def events(
    kind: Annotated[str | None, typer.Option(help="e.g. node.lost, or a prefix such as node.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="Show at most this many.")] = 50,
    output: OutputOpt = Output.table,
) -> None:
    """The cluster event log: nodes joined, lost or cordoned, preemptions, alerts fired and resolved."""
    with client() as api:
        shown = api.list_events(kind=kind, limit=limit)
    out.show(shown, output, _EVENT_COLUMNS)
