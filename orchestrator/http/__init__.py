"""The HTTP surface (Falcon ASGI): the app factory, one resource per endpoint, the OpenAPI document and the
dashboard. It reaches runtimes and adapters only through events and flows."""
