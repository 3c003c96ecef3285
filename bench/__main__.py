"""`bench/run [--smoke] [--only NAME,...] [--out FILE]`: run the benchmarks, print tables, write JSON."""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.ack import bench_ack
from bench.common import REPO_ROOT, SMOKE, Budget
from bench.concurrency import bench_concurrency
from bench.density import bench_density
from bench.prebuilt import bench_prebuilt
from bench.preview import bench_preview
from bench.reconcile import bench_reconcile
from bench.scale import bench_scale
from bench.seeded import bench_seeded
from bench.sleep import bench_sleep
from bench.swarm import bench_swarm

BENCHMARKS: dict[str, Callable[[Budget], dict[str, Any]]] = {
    "ack": bench_ack, "scale": bench_scale, "preview": bench_preview, "concurrency": bench_concurrency,
    "swarm": bench_swarm, "sleep": bench_sleep, "density": bench_density, "reconcile": bench_reconcile,
    "seeded": bench_seeded, "prebuilt": bench_prebuilt,
}


def _table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    cells = [header] + [[_fmt(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells[1:]]
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


def report(results: dict[str, Any]) -> str:
    out = []
    if "ack" in results:
        ack = results["ack"]
        out.append(_table("Webhook acknowledgement (queue mode)",
                          ["mode", "offered/s", "conns", "sent", "accepted", "accepted/s", "p50 ms", "p99 ms",
                           "max ms", "steal %"],
                          [[lv["mode"], lv["offered_rps"], lv["connections"], lv["sent"], lv["accepted"],
                            lv["accepted_per_s"], lv["p50_ms"], lv["p99_ms"], lv["max_ms"], lv["cpu_steal_pct"]]
                           for lv in ack["levels"]]))
        out.append(f"processed once: {ack['processed_once']}, twice: {ack['processed_twice']}, lost: {ack['lost']}; "
                   f"RSS idle {ack['rss_idle_mib']:.1f} MiB, peak under load {ack['rss_loaded_peak_mib']:.1f} MiB; "
                   f"queue drained {ack['drained_after_s']:.0f} s after the last request\n")
    if "scale" in results:
        out.append(_table("Scale: GET /api/previews and a deploy's store write",
                          ["records", "store KiB", "GET p50 ms", "GET p99 ms", "write p50 ms", "write p99 ms"],
                          [[s["records"], s["store_bytes"] / 1024, s["get"]["p50_ms"], s["get"]["p99_ms"],
                            s["write"]["p50_ms"], s["write"]["p99_ms"]] for s in results["scale"]["sizes"]]))
    if "preview" in results:
        preview = results["preview"]
        rows = []
        for cache in ("cold", "warm"):
            m = preview[cache]["median"]
            rows.append([cache, "deploy", m["raw_deploy_s"], m["service_deploy_s"], m["deploy_overhead_pct"]])
            rows.append([cache, "update", m["raw_update_s"], m["service_update_s"], m["update_overhead_pct"]])
        out.append(_table(f"Time to preview (medians of {preview['repeats']}, sample {preview['sample']})",
                          ["cache", "flow", "raw s", "service s", "overhead %"], rows))
        t = preview["targets"]
        warm = preview["warm"]["median"]
        out.append(_table("Targets (issues 16 and 35)", ["figure", "value", "target"],
                          [["second PR / raw path (warm)", t["second_pr_vs_raw"], "<= 0.6 (16), <= 0.35 (35)"],
                           ["push / cold first deploy", t["push_vs_cold_deploy"], "<= 0.3"],
                           ["update to a commit built before / raw", warm["service_update_s"] / warm["raw_update_s"],
                            "<= 0.5 (35)"],
                           ["first deploy, cold, s", t["first_deploy_cold_s"], "no slower"]]))
    if "concurrency" in results:
        out.append(_table("Concurrency: pull requests opened at once",
                          ["MAX_CONCURRENT_BUILDS", "PRs", "first preview s", "all previews s"],
                          [[r["max_concurrent_builds"], r["prs"], r["first_s"], r["all_s"]]
                           for r in results["concurrency"]["runs"]]))
    if "swarm" in results:
        swarm = results["swarm"]
        if "skipped" in swarm:
            out.append(f"Swarm: skipped ({swarm['skipped']})\n")
        else:
            out.append(_table(f"One host against a three-node swarm (medians of {swarm['repeats']}, warm, "
                              f"sample {swarm['sample']})", ["runtime", "deploy s", "update s", "cleanup s"],
                              [[name, swarm[name]["median"]["deploy_s"], swarm[name]["median"]["update_s"],
                                swarm[name]["median"]["cleanup_s"]] for name in ("one_host", "swarm")]))
    if "sleep" in results:
        sleep = results["sleep"]
        out.append(_table(f"Wake of a sleeping preview: its first request through nginx (median and max of "
                          f"{sleep['repeats']})", ["sample", "request s (median)", "request s (max)",
                                                   "wake flow s (median)"],
                          [[f"{name} ({s['sample']})", s["median_request_s"], s["max_request_s"],
                            s["median_wake_flow_s"]] for name, s in sleep["samples"].items()]))
    if "density" in results:
        d = results["density"]
        out.append(_table(f"Density: {d['previews']} Go previews, idle after {d['idle_seconds']:.0f} s",
                          ["figure", "value"],
                          [["all running, s", d["all_running_s"]], ["memory before, MiB", d["memory_before_mib"]],
                           ["memory at peak, MiB", d["memory_peak_mib"]],
                           ["memory all asleep, MiB", d["memory_asleep_mib"]],
                           ["running containers asleep", d["running_containers_asleep"]],
                           ["wake, Go page, s (median)", d["wake_go_s"]["median"]],
                           [f"wake, Go page, s (p95 of {len(d['wake_go_s']['runs'])})",
                            d["wake_go_s"].get("p95", float("nan"))],
                           ["wake, Go page, s (max)", d["wake_go_s"]["max"]],
                           ["wake, PostgreSQL page, s", d["wake_postgres_s"]],
                           ["all removed, s", d["all_removed_s"]], ["memory after, MiB", d["memory_after_mib"]]]))
    if "reconcile" in results:
        r = results["reconcile"]
        out.append(_table(f"Reconcile: {r['open_pull_requests']} open pull requests in {r['repositories']} "
                          "repositories (fake GitHub over HTTP)",
                          ["look", "s", "requests", "304s", "rate limit spent", "corrections"],
                          [[look["look"], look["seconds"], look["requests"], look["not_modified"],
                            look["rate_limit_spent"], look["corrections"]] for look in r["looks"]]))
        log = r["delivery_log"]
        out.append(f"Delivery log: {log['entries']} entries in {log['bytes'] / 1024 / 1024:.1f} MiB "
                   f"({log['bytes_per_entry']:.0f} bytes each, a third keeping their event); "
                   f"{log['record_ms']:.2f} ms to record one\n")
    for database, seeded in (results.get("seeded") or {}).items():
        t = seeded["targets"]
        out.append(_table(f"Preview data ({database}): {seeded['rows']} rows, {seeded['dump_mb']:.0f} MB of SQL",
                          ["figure", "s", "target"],
                          [["a person's restore into a fresh container", seeded["person_restore_s"], ""],
                           ["first PR (restores the seed)", seeded["first_pr_restore_s"], ""],
                           ["new PR with the seed (running, rows there)", seeded["new_pr_seeded_s"],
                            f"<= {0.25 * seeded['person_restore_s']:.1f} (0.25 x person: {t['new_pr_vs_person']:.2f})"],
                           ["new PR without a seed", seeded["new_pr_without_seed_s"], ""],
                           ["seed's cost on a new PR", t["seed_cost_s"], "<= 1"],
                           ["reset-db to the seed", seeded["reset_db_s"], "< 3"]]))
    if "prebuilt" in results:
        prebuilt = results["prebuilt"]
        out.append(_table(f"First pull request with a base preview (medians of {prebuilt['repeats']}, cold engine)",
                          ["scenario", "raw s", "base ahead s", "first PR s", "x raw", "target"],
                          [[name, s["median"]["raw_first_s"], s["median"]["base_preview_s"],
                            s["median"]["service_first_s"], s["targets"]["first_pr_vs_raw"],
                            f"<= {s['targets']['target']}"] for name, s in prebuilt["scenarios"].items()]))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny budget: every benchmark once (the tests')")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help=f"comma-separated: {', '.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "latest.json")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    budget = SMOKE if args.smoke else Budget()
    results: dict[str, Any] = {}
    meta = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "smoke": args.smoke,
            "python": platform.python_version(), "cpus": _cpus(), "commit": _commit()}
    for name in chosen:
        began = time.monotonic()
        print(f"== {name} ...", file=sys.stderr, flush=True)
        results[name] = BENCHMARKS[name](budget)
        print(f"== {name} took {time.monotonic() - began:.0f}s", file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, **results}, indent=2) + "\n")
    print(report(results))
    print(f"JSON written to {args.out}")
    return 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
