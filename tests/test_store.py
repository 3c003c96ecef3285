"""The tracking store: the spec's shape, atomic writes, a lock across processes, corrupt files kept."""

from __future__ import annotations

import json
import multiprocessing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.state.records import DeploymentRecord, PortAllocation, StoreFile
from orchestrator.state.store import DeploymentStore, StoreError


def record(n: int) -> DeploymentRecord:
    now = datetime.now(UTC)
    return DeploymentRecord(
        prNumber=n, repoName="api", repoOwner="acme", projectSlug="acme-api", deploymentId=f"acme-api-{n}",
        branch="main", commitSha="a" * 40, framework="go", dbType="postgres", appPort=8080,
        exposedAppPort=8000 + n, exposedDbPort=9000 + n, status="running", createdAt=now, updatedAt=now,
        url=f"http://localhost/acme-api/pr-{n}/", commentId=None,
    )


def add(data: StoreFile, n: int) -> None:
    data.deployments[f"acme-api-{n}"] = record(n)
    data.portAllocations[f"acme-api-{n}"] = PortAllocation(exposedAppPort=8000 + n, exposedDbPort=9000 + n)


def test_missing_file_reads_as_empty_and_update_writes_spec_shape(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path / "nested" / "deployments.json")
    assert store.read() == StoreFile()
    store.update(lambda data: add(data, 3))
    raw = json.loads(store.path.read_text())
    assert set(raw) == {"deployments", "portAllocations"}
    assert raw["portAllocations"] == {"acme-api-3": {"exposedAppPort": 8003, "exposedDbPort": 9003}}
    assert raw["deployments"]["acme-api-3"]["deploymentId"] == "acme-api-3"
    assert store.read().deployments["acme-api-3"] == record(3).model_copy(
        update={"createdAt": store.read().deployments["acme-api-3"].createdAt,
                "updatedAt": store.read().deployments["acme-api-3"].updatedAt})
    assert [p.name for p in store.path.parent.iterdir() if p.suffix == ".tmp"] == []


@pytest.mark.parametrize("content", ["{broken", '{"deployments": []}', '{"deployments": {"x": {}}}'])
def test_corrupt_file_is_reported_and_never_overwritten(tmp_path: Path, content: str) -> None:
    store = DeploymentStore(tmp_path / "deployments.json")
    store.path.write_text(content)
    with pytest.raises(StoreError, match=str(store.path)):
        store.read()
    with pytest.raises(StoreError, match="left untouched"):
        store.update(lambda data: add(data, 1))
    assert store.path.read_text() == content


def test_a_failed_change_writes_nothing(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path / "deployments.json")
    store.update(lambda data: add(data, 1))
    before = store.path.read_bytes()

    def broken(data: StoreFile) -> None:
        add(data, 2)
        raise ValueError("half way")

    with pytest.raises(ValueError):
        store.update(broken)
    assert store.path.read_bytes() == before


def test_unreadable_file_is_reported(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path / "deployments.json")
    store.path.mkdir()  # unreadable as a file, even for root
    with pytest.raises(StoreError, match="cannot be read"):
        store.read()


def test_unwritable_directory_is_reported(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = DeploymentStore(blocker / "deployments.json")
    with pytest.raises(StoreError, match="cannot be written"):
        store.update(lambda data: add(data, 1))


def _add_many(path: str, start: int) -> None:
    store = DeploymentStore(Path(path))
    for n in range(start, start + 25):
        store.update(lambda data, n=n: add(data, n))


def test_updates_from_several_processes_are_serialised(tmp_path: Path) -> None:
    path = tmp_path / "deployments.json"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_add_many, args=(str(path), start)) for start in (1, 101, 201, 301)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    data = DeploymentStore(path).read()
    assert len(data.deployments) == 100
    assert len(data.portAllocations) == 100


def test_cached_reads_see_writes_from_another_store_object(tmp_path: Path) -> None:
    # Two objects on one file stand for two processes: each must see the other's writes despite its cache.
    first = DeploymentStore(tmp_path / "deployments.json")
    second = DeploymentStore(tmp_path / "deployments.json")
    first.update(lambda data: add(data, 1))
    assert list(second.read().deployments) == ["acme-api-1"]
    for n in range(2, 30):  # many small writes: identical sizes and mtimes within one tick must not fool it
        (first if n % 2 else second).update(lambda data, n=n: add(data, n))
        assert len(first.read().deployments) == len(second.read().deployments) == n


def test_a_caller_changing_what_it_read_does_not_change_the_store(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path / "deployments.json")
    store.update(lambda data: add(data, 1))
    mine = store.read()
    mine.deployments.clear()
    assert list(store.read().deployments) == ["acme-api-1"]
    with pytest.raises(ValidationError):
        store.read().deployments["acme-api-1"].status = "failed"  # type: ignore[misc]  # records are frozen


def test_records_json_is_each_record_as_the_api_shows_it(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path / "deployments.json")
    store.update(lambda data: [add(data, n) for n in (1, 2)])
    store.update(lambda data: data.deployments.update(
        {"acme-api-2": data.deployments["acme-api-2"].model_copy(update={"status": "failed"})}))
    listed = [json.loads(raw) for raw in store.records_json()]
    assert listed == [r.model_dump(mode="json") for r in store.read().deployments.values()]
    assert [r["status"] for r in listed] == ["running", "failed"]
    assert json.loads(store.path.read_text())["deployments"]["acme-api-2"]["status"] == "failed"
