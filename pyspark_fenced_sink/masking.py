"""The one secret masker: what may be logged, raised or stored of a property or a message (PROTOCOL.md §10).

:func:`redact` masks secret-looking property values; :func:`mask_secrets` masks
secrets inside text (URI passwords, Azure keys, SAS signatures);
:func:`looks_secret` tells what must never become public metadata. Bottom floor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["looks_secret", "mask_secrets", "redact"]

_SECRET_KEY = re.compile(r"secret|password|passwd|token|credential|key|auth|sas|connection-string", re.IGNORECASE)
_URI_PASSWORD = re.compile(r"(://[^:/@]*:)([^@]+)(@)")  # the user may be empty: redis://:pw@host
#: Secrets inside values: an Azure connection string's key or SAS, a SAS URL's signature.
_VALUE_SECRET = re.compile(r"((?:AccountKey|SharedAccessSignature|sig)=)([^;&\s]+)", re.IGNORECASE)


def redact(properties: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to log: secret-looking values masked, passwords removed from URIs."""
    return {k: "****" if _SECRET_KEY.search(k) else mask_secrets(str(v)) for k, v in properties.items()}


def mask_secrets(text: str) -> str:
    """``text`` with passwords in URIs, Azure account keys and SAS signatures masked (for messages)."""
    return _VALUE_SECRET.sub(r"\1****", _URI_PASSWORD.sub(r"\1****\3", text))


def looks_secret(key: str, value: str = "") -> bool:
    """True if ``key`` names a credential or ``value`` holds a password in a URI."""
    return bool(_SECRET_KEY.search(key) or _URI_PASSWORD.search(value))
