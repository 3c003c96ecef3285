"""Every benchmark once with the smoke budget, so that bench/ cannot rot. Figures are not asserted here (a
timed test would be flaky and prove nothing); what is asserted is that each one measured what it claims."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.payloads import REPO_ROOT


def run_bench(only: str, out: Path) -> dict:
    result = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--only", only, "--out", str(out)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"JSON written to {out}" in result.stdout
    data: dict = json.loads(out.read_text())
    assert data["meta"]["smoke"] is True
    return data


@pytest.mark.live
def test_ack_and_scale_benchmarks_run(tmp_path: Path) -> None:
    data = run_bench("ack,scale", tmp_path / "out.json")
    ack = data["ack"]
    assert ack["lost"] == 0 and ack["processed_twice"] == 0
    assert ack["processed_once"] == sum(level["sent"] for level in ack["levels"]) > 0
    assert all(level["p50_ms"] > 0 and level["p99_ms"] >= level["p50_ms"] for level in ack["levels"])
    assert 0 < ack["rss_idle_mib"] <= ack["rss_loaded_peak_mib"]
    [size] = data["scale"]["sizes"]
    assert size["records"] == 10 and size["get"]["p50_ms"] > 0 and size["write"]["p50_ms"] > 0


@pytest.mark.live
@pytest.mark.docker
def test_preview_concurrency_and_prebuilt_benchmarks_run(tmp_path: Path) -> None:
    """Also: the smoke run leaves the engine's build cache as it found it (a contributor's, on their machine)."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "Dockerfile").write_text(f"FROM po-standin/base:test\nRUN echo {secrets.token_hex(8)} > /probe\n")
    tag = f"po-test-cache-probe:{secrets.token_hex(4)}"
    (probe / "compose.yml").write_text(f"services:\n  probe:\n    build: .\n    image: {tag}\n")
    # BuildKit's cache, as previews use it (compose build): the legacy `docker build` keeps no such cache
    build = ["docker", "compose", "--progress", "plain", "--project-directory", str(probe), "-p",
             f"po-test-probe-{secrets.token_hex(3)}", "build"]
    subprocess.run(build, capture_output=True, text=True, timeout=300, check=True)
    try:
        data = run_bench("preview,concurrency,prebuilt", tmp_path / "out.json")
        again = subprocess.run(build, capture_output=True, text=True, timeout=300, check=True)
        output = again.stdout + again.stderr
        step = next(line for line in output.splitlines() if "RUN echo" in line)
        assert f"{step.split()[0]} CACHED" in output, output[-2000:]
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)
    assert data["preview"]["cold_cache_pruned"] is False
    for cache in ("cold", "warm"):
        median = data["preview"][cache]["median"]
        for key in ("raw_deploy_s", "service_deploy_s", "raw_update_s", "service_update_s"):
            assert median[key] > 0, (cache, key)
    [run] = data["concurrency"]["runs"]
    assert run["prs"] == 2 and 0 < run["first_s"] <= run["all_s"]
    prebuilt = data["prebuilt"]
    assert prebuilt["cold_cache_pruned"] is False and list(prebuilt["scenarios"]) == ["go"]  # no npm registry
    [first] = prebuilt["scenarios"]["go"]["runs"]
    assert all(first[key] > 0 for key in first)
    assert prebuilt["scenarios"]["go"]["targets"]["first_pr_vs_raw"] == first["service_first_s"] / first["raw_first_s"]


@pytest.mark.live
@pytest.mark.docker
def test_sleep_benchmark_runs(tmp_path: Path) -> None:
    data = run_bench("sleep", tmp_path / "out.json")
    for name in ("small", "postgres"):
        sample = data["sleep"]["samples"][name]
        [run] = sample["runs"]
        assert 0 < run["wake_flow_s"] <= run["request_s"], (name, run)


@pytest.mark.live
@pytest.mark.docker
def test_density_benchmark_runs(tmp_path: Path) -> None:
    data = run_bench("density", tmp_path / "out.json")
    density = data["density"]
    assert density["previews"] == 2 and density["all_running_s"] > 0
    assert density["running_containers_asleep"] == 0 and density["memory_asleep_mib"] > 0  # the previews' own
    [wake] = density["wake_go_s"]["runs"]  # the Go preview woken, the PostgreSQL one apart
    assert density["wake_go_s"]["p95"] == wake == density["wake_go_s"]["max"]
    assert 0 < wake and 0 < density["wake_postgres_s"]


def test_reconcile_benchmark_runs(tmp_path: Path) -> None:
    data = run_bench("reconcile", tmp_path / "out.json")
    first, unchanged, changed = data["reconcile"]["looks"]
    assert data["reconcile"]["open_pull_requests"] == 9
    assert first["requests"] == 3 and first["corrections"] == 0
    assert unchanged["not_modified"] == 3 and unchanged["rate_limit_spent"] == 0
    assert changed["corrections"] == 6  # 3 pushes and 3 closes no webhook reported
    assert data["reconcile"]["delivery_log"]["entries"] == 100 and data["reconcile"]["delivery_log"]["bytes"] > 0


@pytest.mark.live
@pytest.mark.docker
def test_seeded_benchmark_runs(tmp_path: Path) -> None:
    data = run_bench("seeded", tmp_path / "out.json")
    seeded = data["seeded"]["postgres"]
    assert seeded["rows"] == 2000 and seeded["dump_mb"] > 0
    for figure in ("person_restore_s", "first_pr_restore_s", "new_pr_seeded_s", "new_pr_without_seed_s",
                   "reset_db_s"):
        assert seeded[figure] > 0, figure
    assert seeded["targets"]["new_pr_vs_person"] == seeded["new_pr_seeded_s"] / seeded["person_restore_s"]
