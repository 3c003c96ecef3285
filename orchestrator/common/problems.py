"""A pydantic validation error as one line a client can act on (webhook bodies, API requests)."""

from __future__ import annotations

from pydantic import ValidationError


def describe_problems(exc: ValidationError) -> str:
    """The first three problems of a validation error, each naming its field."""
    problems = []
    for error in exc.errors(include_input=False, include_url=False)[:3]:
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "missing":
            problems.append(f"{where} is required")
        else:
            problems.append(f"{where} is not valid ({error['msg'].removeprefix('Value error, ')})")
    return "; ".join(problems)
