"""docs/benchmarks.md says what its JSON says: every figure of a table copied from a committed run equals that run's
value, rounded as the table shows it (issue 29: figures had been rounded differently from their JSON), and every
result file the page cites is committed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")


def table_after(heading: str) -> list[list[str]]:
    """The rows (cells stripped of bold) of the first markdown table after the line starting with `heading`."""
    lines = PAGE[PAGE.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().replace("**", "") for cell in line.strip("|").split("|")])
    return rows


def shown(value: float, text: str) -> bool:
    """Whether `text` (a figure, maybe followed by a unit or a remark) is `value` rounded to the decimals it shows."""
    figure = re.match(r"-?[0-9][0-9,]*(?:\.([0-9]+))?", text)
    assert figure is not None, text
    decimals = len(figure[1] or "")
    return f"{value:.{decimals}f}" == figure[0].replace(",", "")


def result(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "bench" / "results" / name).read_text(encoding="utf-8"))
    return data


def test_every_result_file_the_page_cites_is_committed() -> None:
    cited = set(re.findall(r"bench/results/([A-Za-z0-9._-]+\.json)", PAGE)) - {"latest.json"}
    assert len(cited) >= 5
    missing = sorted(name for name in cited if not (ROOT / "bench" / "results" / name).is_file())
    assert missing == []
    for name in cited:
        assert isinstance(result(name), dict), name


def test_the_acknowledgement_table_is_its_run_rounded() -> None:
    levels = result("2026-11-22.json")["ack"]["levels"]
    rows = table_after("### Webhook acknowledgement, `queue` mode")
    assert len(rows) == len(levels)
    for row, level in zip(rows, levels, strict=True):
        assert row[0].replace(" ", "-") == level["mode"]
        figures = [level["accepted_per_s"], level["p50_ms"], level["p99_ms"], level["max_ms"], level["cpu_steal_pct"]]
        wrong = [(text, value) for text, value in zip(row[5:], figures, strict=True) if not shown(value, text)]
        assert wrong == [], row


def test_the_scale_table_is_its_run_rounded() -> None:
    sizes = result("2026-11-22.json")["scale"]["sizes"]
    rows = table_after("### Scale")
    assert len(rows) == len(sizes)
    for row, size in zip(rows, sizes, strict=True):
        assert row[0].replace(",", "") == str(size["records"])
        get, write = (cell.split(" / ") for cell in row[2:4])
        figures = [size["get"]["p50_ms"], size["get"]["p99_ms"], size["write"]["p50_ms"], size["write"]["p99_ms"]]
        wrong = [(text, value) for text, value in zip([*get, *write], figures, strict=True) if not shown(value, text)]
        assert wrong == [], row


SEEDED_ROWS = {
    "a person's restore into a fresh container": lambda s: s["person_restore_s"],
    "first pull request (restores the seed, beside the build)": lambda s: s["first_pr_restore_s"],
    "new pull request: `running`": lambda s: s["seeded_pr_running_s"],
    "new pull request: `running` with the last row there": lambda s: s["new_pr_seeded_s"],
    "new pull request without a seed": lambda s: s["new_pr_without_seed_s"],
    "the seed's cost on a new pull request": lambda s: s["targets"]["seed_cost_s"],
    "`reset-db` back to the seed": lambda s: s["reset_db_s"],
}


SPARES_ROWS = {
    "a person's restore into a fresh container": lambda s: s["person_restore_s"],
    "first pull request (restores the seed, beside the build)": lambda s: s["first_pr_restore_s"],
    "a spare made after it (5 s of it the wait)": lambda s: s["spare_made_after_first_pr_s"],
    "new pull request: `running` with the last row there": lambda s: s["new_pr_seeded_s"],
    "new pull request without a seed": lambda s: s["new_pr_without_seed_s"],
    "the seed's cost on a new pull request": lambda s: s["targets"]["seed_cost_s"],
    "`reset-db` back to the seed": lambda s: s["reset_db_s"],
}


@pytest.mark.parametrize(("column", "database"), [(1, "postgres"), (2, "mysql")])
@pytest.mark.parametrize(("name", "heading", "figures"), [
    ("seeded-2026-11-27.json", "## Preview data (issue 33)", SEEDED_ROWS),
    ("seeded-2026-11-28.json", "### Spare layers: the targets met (2026-11-28)", SPARES_ROWS),
])
def test_the_preview_data_tables_are_their_runs_rounded(column: int, database: str, name: str, heading: str,
                                                        figures: dict[str, Any]) -> None:
    seeded = result(name)["seeded"][database]
    rows = {row[0]: row for row in table_after(heading)}
    assert set(rows) == set(figures)
    for label, figure in figures.items():
        assert shown(figure(seeded), rows[label][column]), (label, rows[label][column], figure(seeded))
    ratio = re.search(r"\(([0-9.]+) ×\)", rows["new pull request: `running` with the last row there"][column])
    assert ratio is not None and shown(seeded["targets"]["new_pr_vs_person"], ratio[1])


def test_the_layered_empty_seeds_table_is_its_two_runs_rounded() -> None:
    before, after = (result(name)["preview"] for name in ("preview-2026-11-28.json", "preview-2026-11-28b.json"))
    rows = table_after("### Empty seeds layered: the second pull request at 0.27 ×")
    flows = {"deploy": "deploy", "update (a push of code never built)": "update", "deploy (second PR)": "deploy",
             "update (a commit built before)": "update"}
    assert len(rows) == 4
    for row in rows:
        cache, flow = row[0], flows[row[1]]
        raw = [figure.strip() for figure in row[2].split("/")]
        assert shown(before[cache]["median"][f"raw_{flow}_s"], raw[0]), row
        assert shown(after[cache]["median"][f"raw_{flow}_s"], raw[1]), row
        assert shown(before[cache]["median"][f"service_{flow}_s"], row[3]), row
        assert shown(after[cache]["median"][f"service_{flow}_s"], row[4]), row
    assert shown(after["targets"]["second_pr_vs_raw"], "0.27")
