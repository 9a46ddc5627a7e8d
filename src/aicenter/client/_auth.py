"""Health, login/logout, the signed-in user and API tokens."""

from __future__ import annotations

from datetime import datetime

from aicenter.client._base import UNSET, BaseClient, body
from aicenter.client.models import Health, LoginResult, MyWorkspace, Token, TokenCreated, User


class AuthMixin(BaseClient):
    def health(self) -> Health:
        """The server's status and version; needs no token."""
        return self._one(Health, "GET", "/health")

    def login(self, username: str, password: str, *, token_name: str | None = None) -> LoginResult:
        """Exchange a user name and password for a token, and use that token from now on.

        Args:
            username: The user's name.
            password: The user's password.
            token_name: A name to recognise the token by in ``list_tokens`` (server default: ``cli``).

        Returns:
            The token (shown only now), its expiry and the user.

        Raises:
            ApiError: ``unauthenticated`` for a wrong name or password, ``rate_limited`` after too many failures.
        """
        result = self._one(
            LoginResult,
            "POST",
            "/auth/login",
            json=body(username=username, password=password, token_name=token_name or UNSET),
        )
        self.token = result.token
        return result

    def logout(self) -> None:
        """Revoke the token this client uses, and forget it."""
        self._json("POST", "/auth/logout")
        self.token = None

    def me(self) -> User:
        """The signed-in user."""
        return self._one(User, "GET", "/users/me")

    def update_me(
        self, *, display_name: str = UNSET, email: str | None = UNSET, default_workspace_id: int | None = UNSET
    ) -> User:
        """Change the signed-in user's own profile; fields left out stay as they are, ``email=None`` clears it."""
        payload = body(
            display_name=display_name,
            email="" if email is None else email,  # the server reads null as "unchanged" and "" as "clear"
            default_workspace_id=default_workspace_id,
        )
        return self._one(User, "PATCH", "/users/me", json=payload)

    def change_password(self, current_password: str, new_password: str) -> None:
        """Change the signed-in user's password."""
        self._json(
            "POST", "/users/me/password", json={"current_password": current_password, "new_password": new_password}
        )

    def my_workspaces(self) -> list[MyWorkspace]:
        """The workspaces the signed-in user belongs to, each with the user's role there."""
        return self._array(MyWorkspace, "/users/me/workspaces")

    def list_tokens(self, *, include_revoked: bool = False) -> list[Token]:
        """The signed-in user's tokens, without their secrets."""
        return self._array(Token, "/tokens", {"include_revoked": "true" if include_revoked else "false"})

    def create_token(self, name: str, *, expires_at: datetime | None = None) -> TokenCreated:
        """Create a named API token. Its secret (``.token``) is in this answer only.

        Args:
            name: A name to recognise it by.
            expires_at: When it stops working (UTC); None: never.
        """
        payload = body(name=name, expires_at=expires_at.isoformat() if expires_at else UNSET)
        return self._one(TokenCreated, "POST", "/tokens", json=payload)

    def revoke_token(self, token_id: int) -> None:
        """Revoke one of the signed-in user's tokens."""
        self._json("DELETE", f"/tokens/{token_id}")
