"""Notebooks (debug environments): a job of kind ``notebook`` running JupyterLab and an SSH agent in its sandbox.

Create, start, stop, save and delete (``_lifecycle``, ``_save``); views and queries; the endpoints the data planes
(``gateway.notebooks`` and the SSH gateway) reach and the SSH agent's files (``_connect``); the idle culler's
reads and writes (``_idle``). Who may do what: members of the workspace see a notebook's metadata, its owner
(only) opens, starts and saves it, the owner and workspace admins stop and delete it, platform admins see it and
force-stop it (``jobs.force_stop``) but never open it.
"""

from aicenter.services.notebooks._connect import (
    Endpoint,
    endpoints,
    notebook_host_key,
    prepare_state,
    refresh_authorized_keys,
    write_authorized_keys,
)
from aicenter.services.notebooks._idle import RunningNotebook, apply_idle, load_running, record_proxy_activity
from aicenter.services.notebooks._lifecycle import (
    create_notebook,
    delete_notebook,
    require_owner,
    set_idle_timeout,
    start_notebook,
    stop_notebook,
)
from aicenter.services.notebooks._queries import get_notebook, list_notebooks
from aicenter.services.notebooks._save import Saved, save_notebook
from aicenter.services.notebooks._train import train_spec
from aicenter.services.notebooks._views import NotebookView, load_notebook, notebook_views, ssh_host_alias

__all__ = [
    "Endpoint",
    "NotebookView",
    "RunningNotebook",
    "Saved",
    "apply_idle",
    "create_notebook",
    "delete_notebook",
    "endpoints",
    "get_notebook",
    "list_notebooks",
    "load_notebook",
    "load_running",
    "notebook_host_key",
    "notebook_views",
    "prepare_state",
    "record_proxy_activity",
    "refresh_authorized_keys",
    "require_owner",
    "save_notebook",
    "set_idle_timeout",
    "ssh_host_alias",
    "start_notebook",
    "stop_notebook",
    "train_spec",
    "write_authorized_keys",
]
