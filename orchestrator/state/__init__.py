"""State: the tracking store (records and port allocations, one JSON file under a lock) and the port rule."""
