"""The text of the one pull-request comment the service keeps up to date."""

from __future__ import annotations

from orchestrator.common.naming import BASE, parse_deployment_id
from orchestrator.common.text_table import printable
from orchestrator.flows.error_lines import error_line
from orchestrator.state.records import PreviewLink

MARKER = "<!-- preview-orchestrator -->"


TRIGGERS = {
    "reconcile": "Started by the service's regular look at the open pull requests (RECONCILE_INTERVAL_MINUTES): "
                 "no webhook reported this change.",
    "relink": "Restarted at the same commit because a linked preview appeared, moved or went away (links).",
    "replay": "Started again from the service's delivery log (a replayed delivery).",
    "command": "Started by `/preview {command}` from @{author}.",
    "operator": "Started by the service's operator (`{command}` through its API).",
}


def with_trigger(body: str, trigger: str | None, command: str | None = None, author: str | None = None) -> str:
    """A comment's text, with a last line saying what started the flow when it was not the code host's delivery."""
    if trigger not in TRIGGERS:
        return body
    return f"{body}\n\n<sub>{TRIGGERS[trigger].format(command=command, author=author)}</sub>"


def _linked_preview(deployment_id: str) -> str:
    return "its base preview" if parse_deployment_id(deployment_id)[1] == BASE else f"preview `{deployment_id}`"


def _short(sha: str | None) -> str:
    return (sha or "")[:7] or "unknown"


def building(sha: str | None, updating: bool) -> str:
    verb = "Updating" if updating else "Building"
    return f"{MARKER}\n### ⏳ Preview: {verb.lower()}\n\n{verb} the preview for commit `{_short(sha)}`…"


def ready(url: str, sha: str | None, seconds: float, stages: dict[str, float] | None = None,
          migrations: list[str] | None = None, routes: list[tuple[str, str]] | None = None,
          links: list[PreviewLink] | None = None) -> str:
    """`routes`: the services routed besides the app, (name, link) each, listed under the main link; `links`:
    preview-config.yml's links as resolved."""
    listed = "".join(f"- `{name}`: {link}\n" for name, link in routes or [])
    linked = "".join(f"- `{link.name}` → {printable(link.repo)}: " + (
        f"{_linked_preview(link.deploymentId)} ({link.url})" if link.deploymentId and link.url
        else "no preview runs; deployed without it") + "\n" for link in links or [])
    text = (
        f"{MARKER}\n### ✅ Preview ready\n\n"
        f"**{url}**\n\n"
        + (f"Also routed:\n{listed}\n" if listed else "")
        + (f"Linked:\n{linked}\n" if linked else "") +
        f"Commit `{_short(sha)}`, built in {seconds:.0f} s. It updates on every push and is removed when the "
        "pull request closes."
    )
    if migrations:  # a reviewer knows the database is the seed's plus these
        shown = ", ".join("`" + printable(path).replace("`", "'")[:120] + "`" for path in migrations[:5])
        more = f" and {len(migrations) - 5} more" if len(migrations) > 5 else ""
        text += (f"\n\n🗄️ This pull request changes {len(migrations)} migration"
                 f"{'s' if len(migrations) != 1 else ''}: {shown}{more}.")
    if stages:  # where the time went, the longest first
        spent = " · ".join(f"{name.replace('_', ' ')} {took:.0f} s" if took >= 1 else f"{name.replace('_', ' ')} "
                           f"{took:.1f} s" for name, took in sorted(stages.items(), key=lambda item: -item[1]))
        text += f"\n\n<sub>{spent}</sub>"
    return text


def sleeping(url: str, sha: str | None, idle_minutes: float) -> str:
    idle = f"{idle_minutes:.0f} minutes" if idle_minutes >= 1 else f"{idle_minutes * 60:.0f} seconds"
    return (
        f"{MARKER}\n### 💤 Preview sleeping — opens on the next visit\n\n"
        f"**{url}**\n\n"
        f"Commit `{_short(sha)}`. No one opened it for {idle}, so its containers were stopped (its data is kept); "
        "the next visit wakes it up in a few seconds. It updates on every push and is removed when the pull "
        "request closes."
    )


def awake(url: str, sha: str | None, seconds: float) -> str:
    return (
        f"{MARKER}\n### ✅ Preview ready\n\n"
        f"**{url}**\n\n"
        f"Commit `{_short(sha)}`, woken up in {seconds:.1f} s after sleeping. It updates on every push and is "
        "removed when the pull request closes."
    )


def unfenced(output: str) -> str:
    """Output someone else wrote, safe inside a fenced block: a line of its own with ``` cannot close the fence."""
    return output.replace("```", "`\u200b``")


def failed(message: str, sha: str | None, log_tail: str = "", seconds: float | None = None) -> str:
    after = f" after {seconds:.0f} s" if seconds is not None else ""
    text = (
        f"{MARKER}\n### ❌ Preview failed\n\n"
        f"Commit `{_short(sha)}`{after}: **{message}**\n\n"
    )
    log_tail = unfenced(log_tail)
    if (line := error_line(log_tail)) is not None:
        text += f"```\n{line}\n```\n\n"  # the line that says what went wrong, before the tail it came from
    if log_tail.strip():
        text += f"<details><summary>Last lines of the log</summary>\n\n```\n{log_tail.strip()}\n```\n</details>\n\n"
    return text + "Push a new commit to retry, or close and reopen the pull request."


def fork_push_held(url: str, deployed: str, pushed: str) -> str:
    """An approved fork's preview after a push that was not deployed (forks need each commit approved)."""
    return (
        f"{MARKER}\n### ✅ Preview ready — of the approved commit `{_short(deployed)}`\n\n"
        f"**{url}**\n\n"
        f"The fork's newer commit `{_short(pushed)}` is not deployed: its code would run on the preview host. "
        f"Someone with write permission who reviewed it can comment `/preview approve {pushed}`."
    )


def refused(message: str) -> str:
    return f"{MARKER}\n### ⚠️ No preview\n\n{message}"


def removed() -> str:
    return f"{MARKER}\n### 🧹 Preview removed\n\nThe preview and its database were removed."
