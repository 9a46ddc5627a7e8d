"""SSH public key validation: what a user may register, and the clear refusal of everything else."""

from __future__ import annotations

import asyncssh
import pytest

from aicenter.core.errors import SshKeyInvalid
from aicenter.services.ssh_keys import parse_public_key


def _public(algorithm: str, key_size: int = 2048) -> str:
    key = asyncssh.generate_private_key(algorithm, key_size=key_size) if algorithm == "ssh-rsa" else None
    key = key or asyncssh.generate_private_key(algorithm)
    return key.export_public_key().decode().strip()


def test_ed25519_is_normalized_with_its_comment_and_fingerprint() -> None:
    private = asyncssh.generate_private_key("ssh-ed25519", comment="me@laptop")
    line = private.export_public_key().decode()
    parsed = parse_public_key(f"  {line}\n")
    assert parsed.public_key == line.strip()
    assert parsed.comment == "me@laptop"
    assert parsed.algorithm == "ssh-ed25519"
    assert parsed.fingerprint == private.get_fingerprint("sha256")
    assert parsed.fingerprint.startswith("SHA256:")


@pytest.mark.parametrize("algorithm", ["ecdsa-sha2-nistp256", "ecdsa-sha2-nistp521"])
def test_ecdsa_keys_are_accepted(algorithm: str) -> None:
    assert parse_public_key(_public(algorithm)).algorithm == algorithm


def test_rsa_needs_2048_bits() -> None:
    assert parse_public_key(_public("ssh-rsa", key_size=2048)).algorithm == "ssh-rsa"
    with pytest.raises(SshKeyInvalid, match="1024-bit RSA"):
        parse_public_key(_public("ssh-rsa", key_size=1024))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("ssh-ed25519", "not an OpenSSH public key"),
        ("ssh-ed25519 !!!notbase64!!!", "does not parse"),
        ("ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAAAgQDg", "does not parse"),
        ("ssh-foo AAAA", "not accepted"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----", "PRIVATE"),
    ],
)
def test_refusals_say_why(text: str, says: str) -> None:
    with pytest.raises(SshKeyInvalid, match=says) as caught:
        parse_public_key(text)
    assert caught.value.code == "ssh_key_invalid"
    assert caught.value.details["field"] == "public_key"


def test_dsa_is_refused() -> None:
    with pytest.raises(SshKeyInvalid, match="DSA"):
        parse_public_key(_public("ssh-dss"))


def test_two_keys_pasted_together_are_refused() -> None:
    with pytest.raises(SshKeyInvalid, match="one line"):
        parse_public_key(_public("ssh-ed25519") + "\n" + _public("ssh-ed25519"))


def test_a_type_word_that_lies_about_the_key_is_refused() -> None:
    data = _public("ssh-ed25519").split()[1]
    with pytest.raises(SshKeyInvalid):
        parse_public_key(f"ssh-rsa {data}")
