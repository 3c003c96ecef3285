"""The one way the service derives a value from one of its keys: HMAC-SHA256 of a message whose form names
the purpose (a preview's database password, its derived secrets and built images' names, access tokens, wake
keys). The forms stay where their purpose is; they never change, because what was derived before (a database
volume's password, a link in a comment) must still match."""

from __future__ import annotations

import hashlib
import hmac


def keyed(key: bytes, message: str) -> hmac.HMAC:
    return hmac.new(key, message.encode(), hashlib.sha256)
