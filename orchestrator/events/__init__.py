"""Events: a webhook verified and parsed, kept in the inbox (durable, one per pull request), handed to the
flows by the dispatcher; the TTL scheduler and local previews make events too."""
