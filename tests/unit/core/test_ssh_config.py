"""The ssh config and known_hosts text for a notebook (its use by OpenSSH is tested in tests/integration/gateway)."""

from __future__ import annotations

from aicenter.core.ssh import known_hosts_lines, ssh_config


def test_the_notebook_jumps_through_the_gateway() -> None:
    text = ssh_config(alias="notebook-42", gateway_host="ai.example.org", gateway_port=2222, user="alice")
    assert "Host aicenter-gateway\n  HostName ai.example.org\n  Port 2222\n  User alice\n" in text
    assert "Host notebook-42\n  ProxyJump aicenter-gateway\n  User alice\n  HostKeyAlias notebook-42\n" in text
    assert "IdentityFile" not in text
    with_key = ssh_config(alias="nb", gateway_host="h", gateway_port=22, user="a", identity_file="~/.ssh/k")
    assert with_key.count("  IdentityFile ~/.ssh/k\n  IdentitiesOnly yes\n") == 2  # the jump host needs it too


def test_known_hosts_names_the_port_only_when_not_22() -> None:
    lines = known_hosts_lines(
        gateway_host="h", gateway_port=2222, gateway_key="ssh-ed25519 AAAAgw comment", alias="nb", notebook_key="k AAAA"
    )
    assert lines == ["[h]:2222 ssh-ed25519 AAAAgw", "nb k AAAA"]
    on_22 = known_hosts_lines(gateway_host="h", gateway_port=22, gateway_key="t K", alias="nb", notebook_key="t N")
    assert on_22[0] == "h t K"
