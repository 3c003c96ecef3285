"""What the nginx adapter raises."""


class ProxyError(Exception):
    pass


class FlagUnseen(ProxyError):
    """The route answers closed although its flag exists: nginx's workers cannot look at the flag."""
