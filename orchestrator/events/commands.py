"""`/preview …` commands in pull-request comments: what a comment asks for. The flow that runs them, after asking
the code host whether the author may write to the repository, is flows/commands.py."""

from __future__ import annotations

COMMANDS = {
    "redeploy": "build and start the preview again",
    "destroy": "remove the preview (a push or `/preview redeploy` brings it back)",
    "reset-db": "the database back to its initial state, the app restarted",
    "extend": "the time-to-live starts again",
    "approve": "deploy a fork's pull request at the commit named in full (`/preview approve <sha>`), if that is "
               "still its head",
}
MAX_LINES = 100  # of a comment looked at for the command


def command_in(body: str) -> tuple[str, str | None] | None:
    """The command and its argument of a comment's first line that starts with the word `/preview` (the command
    lower case; "" for `/preview` alone, or what follows it when it is not a command), or None when there is no
    such line. Quoted lines (`> /preview …`, a reply quoting a command) are not commands."""
    for line in body.splitlines()[:MAX_LINES]:
        words = line.strip().split()
        if words and words[0].lower() == "/preview":
            command = words[1].lower()[:40] if len(words) > 1 else ""
            return command, (words[2][:80] if len(words) > 2 else None)
    return None
