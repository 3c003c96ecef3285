"""(3a) The cost of many previews: `GET /api/previews` over HTTP from the real service, and a deploy's store
write (the engine's record update: lock, copy, change one record, atomic write with fsync), at each size."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from bench.common import Budget, scratch
from bench.stats import summary_ms
from orchestrator.state.records import DeploymentRecord, PortAllocation, StoreFile
from orchestrator.state.store import DeploymentStore
from tests.support import web
from tests.support.live import ServiceProcess


def _fill(data: StoreFile, count: int) -> None:
    now = datetime.now(UTC)
    for n in range(1, count + 1):
        key = f"acme-api-{n}"
        data.deployments[key] = DeploymentRecord(
            prNumber=n, repoName="api", repoOwner="acme", projectSlug="acme-api", deploymentId=key,
            branch=f"feature/change-{n}", commitSha=f"{n:040x}", framework="go", dbType="postgres", appPort=8080,
            exposedAppPort=8000 + n % 1000, exposedDbPort=9000 + n % 1000, status="running", createdAt=now,
            updatedAt=now, url=f"http://previews.example.test/acme-api/pr-{n}/", commentId=n, cloneUrl=None)
        data.portAllocations[key] = PortAllocation(exposedAppPort=8000 + n % 1000, exposedDbPort=9000 + n % 1000)


def bench_scale(budget: Budget) -> dict[str, Any]:
    sizes = []
    for count in budget.scale_sizes:
        with scratch("scale") as root:
            store = DeploymentStore(root / "state" / "deployments.json")
            store.update(lambda data, count=count: _fill(data, count))
            writes = []
            for i in range(budget.scale_requests):
                key = f"acme-api-{i % count + 1}"

                def change(data: StoreFile, key: str = key, i: int = i) -> None:
                    data.deployments[key] = data.deployments[key].model_copy(
                        update={"status": "building" if i % 2 else "running", "updatedAt": datetime.now(UTC)})

                began = time.perf_counter()
                store.update(change)
                writes.append(time.perf_counter() - began)
            size_bytes = store.path.stat().st_size
            reads = []
            with ServiceProcess(root, LOG_LEVEL="warn") as service, web.Client(base_url=service.url) as client:
                first = client.get("/api/previews")  # the first read parses the file; later ones are cached
                assert first.status_code == 200 and len(first.json()["deployments"]) == count
                for _ in range(budget.scale_requests):
                    began = time.perf_counter()
                    response = client.get("/api/previews")
                    reads.append(time.perf_counter() - began)
                    assert response.status_code == 200
            sizes.append({"records": count, "store_bytes": size_bytes, "response_bytes": len(first.content),
                          "get": summary_ms(reads), "write": summary_ms(writes)})
    return {"sizes": sizes}
