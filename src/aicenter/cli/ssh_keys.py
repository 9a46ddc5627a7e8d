"""``aicenter ssh-key ...``: register the SSH public keys that open your notebooks over SSH."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from aicenter.cli import output as out
from aicenter.cli.common import CliError, Output, OutputOpt, client, invalid, pick

ssh_key_app = typer.Typer(help="Your SSH public keys (for ssh/sftp/VS Code into notebooks).", no_args_is_help=True)

# Tried in this order when no file is named: what `ssh-keygen` writes by default, newest algorithm first.
DEFAULT_KEYS = ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")

_COLUMNS: list[out.Column] = [
    ("ID", lambda k: k.id),
    ("NAME", lambda k: k.name),
    ("FINGERPRINT", lambda k: k.fingerprint),
    ("ADDED", lambda k: k.created_at),
    ("LAST USED", lambda k: k.last_used_at or "never"),
]


def _read_key(path: str | None) -> tuple[str, str]:
    """The key text and a fallback name (the file's) from ``path``, ``-`` (stdin) or the default key files."""
    if path == "-":
        return sys.stdin.read(), "stdin"
    if path is None:
        ssh_dir = Path.home() / ".ssh"
        found = next((ssh_dir / name for name in DEFAULT_KEYS if (ssh_dir / name).is_file()), None)
        if found is None:
            raise invalid(
                "PATH",
                f"no public key in {ssh_dir} ({', '.join(DEFAULT_KEYS)}); create one with "
                "`ssh-keygen -t ed25519` or name the .pub file",
            )
        chosen = found
    else:
        chosen = Path(path).expanduser()
    if chosen.suffix != ".pub" and chosen.with_name(chosen.name + ".pub").is_file():
        # A private key file named by mistake: never read it, point at its public half.
        raise invalid("PATH", f"{chosen} looks like a private key; register {chosen.name}.pub instead")
    try:
        return chosen.read_text(encoding="utf-8"), chosen.stem
    except (OSError, UnicodeDecodeError) as exc:
        raise invalid("PATH", f"cannot read {chosen}: {exc}") from None


@ssh_key_app.command("add")
def ssh_key_add(
    path: Annotated[
        str | None,
        typer.Argument(help="The .pub file, or - for stdin. Default: ~/.ssh/id_ed25519.pub, else id_ecdsa/id_rsa."),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="Default: the key's comment, else the file's name.")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Register a public key: SSH connections with it then reach your notebooks."""
    text, file_name = _read_key(path)
    if "PRIVATE KEY" in text:
        raise CliError("ssh_key_invalid", "that is a PRIVATE key; never share it: register the .pub file instead")
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise invalid("PATH", f"expected one public key line, found {len(lines)}")
    parts = lines[0].split(None, 2)
    default_name = parts[2].strip() if len(parts) > 2 and parts[2].strip() else file_name
    with client() as api:
        key = api.add_ssh_key(lines[0], name=name or default_name[:64])
    if output is Output.table:
        typer.echo(f"Added SSH key {key.name!r} (id {key.id}, {key.fingerprint}).")
    else:
        out.show(key, output)


@ssh_key_app.command("list")
def ssh_key_list(output: OutputOpt = Output.table) -> None:
    """Your registered public keys."""
    with client() as api:
        out.show(api.ssh_keys(), output, _COLUMNS)


@ssh_key_app.command("delete")
def ssh_key_delete(
    key: Annotated[str, typer.Argument(help="Key id or name.")],
    output: OutputOpt = Output.table,
) -> None:
    """Delete one of your keys; new SSH connections with it are refused."""
    with client() as api:
        found = pick("SSH key", key, api.ssh_keys(), lambda k: k.name, lambda k: k.id)
        api.delete_ssh_key(found.id)
    out.done(f"Deleted SSH key {found.name!r} (id {found.id}).", output)
