"""The SDK's entry point: :class:`Client`, one method per endpoint of the REST API."""

from __future__ import annotations

from aicenter.client._alerts import AlertsMixin
from aicenter.client._auth import AuthMixin
from aicenter.client._billing import BillingMixin, BillingReportsMixin
from aicenter.client._inventory import InventoryMixin
from aicenter.client._jobs import JobsMixin
from aicenter.client._latest import LatestMixin
from aicenter.client._notebooks import NotebooksMixin
from aicenter.client._series import SeriesMixin
from aicenter.client._services import ServicesMixin
from aicenter.client._ssh_keys import SshKeysMixin
from aicenter.client._tenancy import TenancyMixin
from aicenter.client.transfer import TransferMixin


class Client(
    AuthMixin,
    TenancyMixin,
    InventoryMixin,
    TransferMixin,
    ServicesMixin,
    JobsMixin,
    NotebooksMixin,
    SeriesMixin,
    LatestMixin,
    AlertsMixin,
    SshKeysMixin,
    BillingMixin,
    BillingReportsMixin,
):
    """A synchronous client of an aicenter server.

    Every call raises :class:`~aicenter.client.ApiError` on an error answer and
    :class:`~aicenter.client.ConnectionFailed` (a subclass) when no answer comes. ``list_<things>`` methods return an
    iterator over every item, following cursors lazily; ``list_<things>_page`` return one :class:`Page`.

    Example:
        >>> with Client("http://127.0.0.1:8000") as api:
        ...     api.login("alice", "secret")
        ...     for spec in api.list_specs():
        ...         print(spec.name, spec.price_per_hour)
    """
