"""Notebooks (debug environments): create, list, inspect, stop, start, save, delete, train-from-here, SSH.

A notebook is a job of kind ``notebook``: its logs are the job's (:meth:`~aicenter.client.Client.job_logs` with the
notebook's id). JupyterLab is served at ``<server>/notebooks/<id>/lab`` to its owner's signed-in browser.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from aicenter.client._base import PAGE_SIZE, UNSET, BaseClient, body, query
from aicenter.client._jobs import SpecSource, spec_payload
from aicenter.client.errors import ApiError
from aicenter.client.models import Page
from aicenter.client.notebook_models import Notebook, NotebookSaved, NotebookSsh


class NotebooksMixin(BaseClient):
    def create_notebook(self, spec: SpecSource, workspace_id: int | None = None) -> Notebook:
        """Create a notebook and queue it.

        Args:
            spec: The notebook: YAML or JSON text, a :class:`~pathlib.Path` to a file, or a mapping with ``name``,
                ``image``, ``algorithm``, ``datasets``, ``resources`` (a spec name or cpu/memory/gpu), ``env``,
                ``pool``, ``workspace``, ``idle_timeout_s`` (0: never culled).
            workspace_id: The workspace; default: the spec's ``workspace``, else my default workspace.

        Raises:
            ApiError: ``validation_failed`` naming the field; ``not_found`` for a version I cannot see;
                ``conflict`` when I already have a notebook of that name in the workspace.
        """
        payload = body(spec=spec_payload(spec), workspace_id=workspace_id if workspace_id is not None else UNSET)
        return self._one(Notebook, "POST", "/notebooks", json=payload)

    def list_notebooks_page(
        self,
        *,
        workspace_id: int | None = None,
        status: str | Sequence[str] | None = None,
        user: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Notebook]:
        """One page of notebooks of my workspaces (platform admins: every workspace's), newest first.

        Args:
            workspace_id: Only this workspace's.
            status: A status (``running``) or several (``["queued", "running"]``).
            user: Only the notebooks of the user with this name.
            name: Only notebooks of this name.
            limit: Items per page.
            cursor: ``next_cursor`` of the previous page.
        """
        statuses = status if status is None or isinstance(status, str) else ",".join(status)
        params = query(workspace_id=workspace_id, status=statuses, user=user, name=name)
        return self._page(Notebook, "/notebooks", params, limit=limit, cursor=cursor)

    def list_notebooks(
        self,
        *,
        workspace_id: int | None = None,
        status: str | Sequence[str] | None = None,
        user: str | None = None,
        name: str | None = None,
    ) -> Iterator[Notebook]:
        """Every matching notebook, fetched page by page as the iterator advances."""
        return self._iterate(
            lambda c: self.list_notebooks_page(
                workspace_id=workspace_id, status=status, user=user, name=name, limit=PAGE_SIZE, cursor=c
            )
        )

    def get_notebook(self, notebook_id: int) -> Notebook:
        """A notebook with its replicas (every attempt) and status events."""
        return self._one(Notebook, "GET", f"/notebooks/{notebook_id}")

    def notebook_by_name(self, name: str, workspace_id: int | None = None) -> Notebook:
        """My own notebook called ``name``, in ``workspace_id`` or else in whichever of my workspaces has one.

        Names are unique per user and workspace, so within one workspace this is the one.

        Raises:
            ApiError: ``not_found`` (404) when I have none of that name; ``conflict`` (409) when no workspace is
                given and I have one of that name in several (a name must not pick one to stop or delete).
        """
        me = self._json("GET", "/users/me")["username"]
        found = list(self.list_notebooks(workspace_id=workspace_id, user=me, name=name))
        if not found:
            where = f" in workspace {workspace_id}" if workspace_id is not None else ""
            raise ApiError(404, "not_found", f"you have no notebook named {name!r}{where}")
        if len(found) > 1:
            places = ", ".join(f"{n.workspace_name or n.workspace_id} (notebook {n.id})" for n in found)
            raise ApiError(
                409,
                "conflict",
                f"you have notebooks named {name!r} in several workspaces: {places}; name the workspace or the id",
                {"notebook_ids": [n.id for n in found]},
            )
        return self.get_notebook(found[0].id)

    def update_notebook(self, notebook_id: int, idle_timeout_s: int | None) -> Notebook:
        """Set the notebook's idle timeout: seconds (60 s..30 days), 0 never culls, None takes the default
        (the workspace's, else the platform's). Its owner and the workspace's admins may.

        Raises:
            ApiError: ``validation_failed`` for any other value.
        """
        return self._one(Notebook, "PATCH", f"/notebooks/{notebook_id}", json={"idle_timeout_s": idle_timeout_s})

    def stop_notebook(self, notebook_id: int) -> Notebook:
        """Stop it: its resources are released, its work dir is kept (start it again later).

        Raises:
            ApiError: ``invalid_transition`` (409) when it has already stopped.
        """
        return self._one(Notebook, "POST", f"/notebooks/{notebook_id}/stop")

    def start_notebook(self, notebook_id: int) -> Notebook:
        """Queue a stopped or failed notebook again, with the same work dir (its owner only).

        Raises:
            ApiError: ``invalid_transition`` (409) when it is not stopped or failed.
        """
        return self._one(Notebook, "POST", f"/notebooks/{notebook_id}/start")

    def save_notebook(self, notebook_id: int, algorithm: str | None = None, description: str = "") -> NotebookSaved:
        """Save the running notebook's work dir as a new version of an algorithm (its owner only).

        Args:
            notebook_id: The notebook.
            algorithm: The algorithm to add the version to (created if I have none of that name); default: the
                notebook's own.
            description: The version's description.

        Raises:
            ApiError: ``invalid_transition`` (409) when it is not running; ``validation_failed`` when it has no
                algorithm of mine and none is named.
        """
        payload = body(algorithm=algorithm if algorithm is not None else UNSET, description=description)
        return self._one(NotebookSaved, "POST", f"/notebooks/{notebook_id}/save", json=payload)

    def delete_notebook(self, notebook_id: int) -> None:
        """Delete a stopped notebook with its work dir (``invalid_transition`` while it runs: save it first)."""
        self._json("DELETE", f"/notebooks/{notebook_id}")

    def notebook_train_spec(self, notebook_id: int) -> dict[str, Any]:
        """A ``train`` job spec prefilled from the notebook (latest saved version, image, datasets, resources),
        to edit (its command is a placeholder) and give to :meth:`~aicenter.client.Client.submit_job`."""
        spec: dict[str, Any] = self._json("GET", f"/notebooks/{notebook_id}/train-spec")["spec"]
        return spec

    def notebook_ssh(self, notebook_id: int) -> NotebookSsh:
        """How to reach the notebook over SSH through the platform's gateway (its owner only): user, gateway,
        host alias, ``known_hosts`` lines and a ready ``~/.ssh/config`` block."""
        return self._one(NotebookSsh, "GET", f"/notebooks/{notebook_id}/ssh")
