"""What a label is: the one rule for label keys and values, shared by the inventory's checks (which reject a bad
label with a message) and the executors' inventories (which leave an engine's unusable feature out)."""

from __future__ import annotations

import re

__all__ = ["is_label_name", "is_label_prefix", "is_label_value"]

# Label keys as in Kubernetes: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
_PREFIX_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
# Values (and topology names such as racks): the same characters, at most 64 so that any node name fits.
_VALUE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$")


def is_label_prefix(prefix: str) -> bool:
    """A key's DNS-subdomain prefix (``aicenter.io``), at most 253 characters."""
    return len(prefix) <= 253 and _PREFIX_RE.match(prefix) is not None


def is_label_name(name: str) -> bool:
    """A key's name part: at most 63 letters, digits, ``._-``, starting and ending with a letter or digit."""
    return _NAME_RE.match(name) is not None


def is_label_value(value: str) -> bool:
    """A non-empty label value or topology name: as a name, at most 64 characters."""
    return _VALUE_RE.match(value) is not None
