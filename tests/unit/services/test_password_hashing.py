"""Password hashing profiles: production parameters by default, any hash verifies under any profile."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aicenter.services import auth

PASSWORD = "correct-horse-1"
PRODUCTION_PREFIX = "$argon2id$v=19$m=65536,t=3,p=4$"  # RFC 9106's second recommendation
FAST_PREFIX = "$argon2id$v=19$m=8,t=1,p=1$"


@pytest.fixture
def profile() -> Iterator[None]:
    """Restore this process's hashing profile after a test that changes it."""
    before = auth.password_profile()
    yield
    auth.use_password_profile(before)


def test_production_profile_hashes_with_rfc_9106_parameters(profile: None) -> None:
    auth.use_password_profile("production")
    stored = auth.hash_password(PASSWORD)
    assert stored.startswith(PRODUCTION_PREFIX), stored


def test_a_hash_verifies_under_the_other_profile(profile: None) -> None:
    auth.use_password_profile("production")
    production = auth.hash_password(PASSWORD)
    auth.use_password_profile("fast")
    fast = auth.hash_password(PASSWORD)
    assert fast.startswith(FAST_PREFIX), fast

    assert auth.verify_password(production, PASSWORD), "a production hash must verify on a fast-profile server"
    assert not auth.verify_password(production, "wrong-password")
    auth.use_password_profile("production")
    assert auth.verify_password(fast, PASSWORD), "a fast hash must verify on a production server"
    assert not auth.verify_password(fast, "wrong-password")


def test_only_a_cheaper_hash_is_upgraded_and_only_under_production(profile: None) -> None:
    auth.use_password_profile("fast")
    fast = auth.hash_password(PASSWORD)
    assert auth.upgraded_password_hash(fast, PASSWORD) is None, "a fast-profile server must not rehash"
    auth.use_password_profile("production")
    upgraded = auth.upgraded_password_hash(fast, PASSWORD)
    assert upgraded is not None
    assert upgraded.startswith(PRODUCTION_PREFIX), upgraded
    assert auth.verify_password(upgraded, PASSWORD)
    assert auth.upgraded_password_hash(upgraded, PASSWORD) is None, "a production hash is kept as it is"


def test_unknown_profile_is_refused(profile: None) -> None:
    with pytest.raises(ValueError, match="unknown password hashing profile 'cheap'"):
        auth.use_password_profile("cheap")  # type: ignore[arg-type]
    assert auth.password_profile() in auth.PASSWORD_PROFILES
