"""The console's navigation: one list that every area appends its panels to.

A later area adds its page with, for example::

    from aicenter.web.nav import NAV, NavEntry
    NAV.append(NavEntry("jobs", "Jobs", "/jobs", section="Workspace"))

The left navigation shows the sections in ``SECTIONS`` order and, within a section, entries in list order;
an entry appears only when ``visible`` says the signed-in user can use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class NavViewer(Protocol):
    """What visibility rules may look at (implemented by the console's per-request context)."""

    @property
    def is_platform_admin(self) -> bool: ...

    @property
    def is_workspace_admin(self) -> bool: ...


def everyone(viewer: NavViewer) -> bool:
    return True


def platform_admins(viewer: NavViewer) -> bool:
    return viewer.is_platform_admin


@dataclass(frozen=True)
class NavEntry:
    """One link in the left navigation.

    Args:
        key: stable identifier; pages name it to mark the link as current, tests find it as ``nav-<key>``.
        label: the text shown.
        path: where it links; also the prefix that marks it current.
        section: heading it is listed under (one of ``SECTIONS``, or a new one appended to it).
        visible: whether this viewer sees it; hide what they cannot use rather than show a 403.
        description: one line for the home page's "what you can do" list.
    """

    key: str
    label: str
    path: str
    section: str = "Workspace"
    visible: Callable[[NavViewer], bool] = everyone
    description: str = ""


SECTIONS: list[str] = ["Workspace", "Account", "Administration"]

NAV: list[NavEntry] = [
    NavEntry("home", "Home", "/"),
    NavEntry("workspaces", "Workspaces", "/workspaces", description="See your workspaces, their members and quotas."),
    NavEntry("datasets", "Datasets", "/datasets", description="Upload, version, preview and share your data."),
    NavEntry("algorithms", "Algorithms", "/algorithms", description="Your training code, versioned and shareable."),
    NavEntry("images", "Images", "/images", description="Python environments and container images for jobs."),
    NavEntry("models", "Models", "/models", description="Trained models, saved by jobs or uploaded."),
    NavEntry("jobs", "Jobs", "/jobs", description="Submit training jobs, follow their status and logs, stop them."),
    NavEntry(
        "notebooks",
        "Notebooks",
        "/notebooks",
        description="JupyterLab, a terminal or VS Code on the platform's machines; save your work as code.",
    ),
    NavEntry("services", "Services", "/services", description="Models deployed as inference services."),
    NavEntry("specs", "Resource specs", "/specs", description="The resource bundles you can run work on, with prices."),
    NavEntry("pools", "Pools", "/pools", description="The groups of nodes your workspace may use."),
    NavEntry("accelerator-types", "Accelerator types", "/accelerator-types", description="GPUs and NPUs on offer."),
    NavEntry("profile", "My profile", "/profile", section="Account", description="Change your name, e-mail, password."),
    NavEntry("tokens", "My tokens", "/tokens", section="Account", description="Create API tokens for scripts and CI."),
    NavEntry(
        "users",
        "Users",
        "/users",
        section="Administration",
        visible=platform_admins,
        description="Create users, freeze and thaw accounts.",
    ),
    NavEntry(
        "nodes",
        "Nodes",
        "/nodes",
        section="Administration",
        visible=platform_admins,
        description="Hosts and accelerators; cordon, drain, labels.",
    ),
    NavEntry(
        "audit",
        "Audit log",
        "/audit",
        section="Administration",
        visible=platform_admins,
        description="Who changed what, when, and from where.",
    ),
]


def visible_sections(viewer: NavViewer) -> list[tuple[str, list[NavEntry]]]:
    """The sections with at least one visible entry, each with its visible entries, in display order."""
    order = SECTIONS + sorted({e.section for e in NAV} - set(SECTIONS))
    out = []
    for section in order:
        entries = [e for e in NAV if e.section == section and e.visible(viewer)]
        if entries:
            out.append((section, entries))
    return out
