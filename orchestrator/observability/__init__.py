"""Logs (one JSON object per line, secrets masked) and Prometheus metrics."""
