"""Helpers shared by the test suite (importable by a live service process through EVENT_HANDLER)."""
