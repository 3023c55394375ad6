"""Benchmark 6: what volumes cost a pod start — 100 pods with a ConfigMap, a Secret and an emptyDir
volume against the same 100 pods without volumes, in the same run.

Why on the fake CRI runtime: the question is the *agent's* overhead for volumes (reading the
ConfigMap and Secret through the API, the atomic writer, a tmpfs mount per Secret volume, the CRI
mounts), not how fast runc starts a container. ``pykubelet fakecri`` stands in for containerd, with
``pykubelet server`` + ``pykubelet agent`` as ``pykubelet up`` starts them. Run as root: Secret
volumes are real tmpfs mounts (all unmounted again when the pods are deleted; checked at the end).

Per round, each batch of ``--pods`` pods (bound to the node up front, so the scheduler is not
measured) is created at once and timed from the first POST to each pod seen Running through a watch;
then deleted. Batches alternate (plain, volumes, plain, volumes, ...) over ``--rounds`` rounds so
machine noise hits both. Reported: per batch the median and max create→Running time and the time
until all pods ran; the overhead is volumes minus plain, per round and as the median over rounds.

Usage: ``.venv/bin/python bench/bench_volumes.py [--pods 100] [--rounds 2] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    NAMESPACE,
    NODE_NAME,
    SRC,
    Cluster,
    delete_pods,
    log,
    pod_manifest,
    pods_path_rv,
    save_json,
    wait_pods,
)


def plain_pod(name: str) -> dict[str, Any]:
    pod = pod_manifest(name)
    pod["spec"]["nodeName"] = NODE_NAME
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    return pod


def volume_pod(name: str) -> dict[str, Any]:
    pod = plain_pod(name)
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "cfg", "mountPath": "/etc/cfg"},
        {"name": "secret", "mountPath": "/etc/secret"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    pod["spec"]["volumes"] = [
        {"name": "cfg", "configMap": {"name": f"{name}-cfg"}},
        {"name": "secret", "secret": {"secretName": f"{name}-secret"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    return pod


async def create_objects(cluster: Cluster, names: list[str]) -> None:
    assert cluster.api is not None
    api = cluster.api
    secret = base64.b64encode(b"s3cr3t-value").decode()
    await asyncio.gather(*(api.create(f"/api/v1/namespaces/{NAMESPACE}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{n}-cfg"},
        "data": {"app.conf": "level=info\n" * 20, "feature": "on"}}) for n in names))
    await asyncio.gather(*(api.create(f"/api/v1/namespaces/{NAMESPACE}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{n}-secret"},
        "data": {"password": secret, "token": secret}}) for n in names))


async def batch(cluster: Cluster, pods: list[dict[str, Any]]) -> dict[str, float]:
    """Create ``pods`` at once; seconds from the first POST to each Running, then delete them."""
    assert cluster.api is not None
    names = [p["metadata"]["name"] for p in pods]
    rv = await pods_path_rv(cluster.api)
    waiter = asyncio.create_task(wait_pods(cluster.api, set(names), rv))
    await asyncio.sleep(0)
    t0 = time.monotonic()
    await asyncio.gather(*(cluster.api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", p) for p in pods))
    seen = await waiter
    times = sorted(seen[n] - t0 for n in names)
    out = {"median_s": round(statistics.median(times), 3), "p90_s": round(times[int(0.9 * (len(times) - 1))], 3),
           "all_running_s": round(times[-1], 3)}
    await delete_pods(cluster.api, names)
    return out


def tmpfs_left(root: Path) -> list[str]:
    base = str(root.resolve())
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(base)]


def unmount_left(root: Path) -> None:
    for path in sorted(tmpfs_left(root), key=len, reverse=True):
        subprocess.run(["umount", "-l", path], check=False)


def start_fakecri(sock: Path, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "pykubelet", "fakecri", "--listen", f"unix://{sock}"],
                                stdout=out, stderr=subprocess.STDOUT,
                                env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, start_new_session=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="pkv-", dir="/tmp"))
    sock = tmp / "fakecri.sock"
    fake = start_fakecri(sock, tmp / "fakecri.log")
    cluster = Cluster(SimpleNamespace(endpoint=f"unix://{sock}"), tmp / "data")  # type: ignore[arg-type]
    result: dict[str, Any] = {"pods": args.pods, "rounds": []}
    vol_names = [f"vol-{i:03d}" for i in range(args.pods)]
    plain_names = [f"plain-{i:03d}" for i in range(args.pods)]
    try:
        for _ in range(100):
            if sock.exists():
                break
            await asyncio.sleep(0.1)
        await cluster.start()
        await create_objects(cluster, vol_names)
        await batch(cluster, [plain_pod(f"warm-{i}") for i in range(5)])  # warm-up (image, caches)
        for r in range(args.rounds):
            plain = await batch(cluster, [plain_pod(n) for n in plain_names])
            volumes = await batch(cluster, [volume_pod(n) for n in vol_names])
            rnd = {"plain": plain, "volumes": volumes,
                   "overhead_median_ms": round(1000 * (volumes["median_s"] - plain["median_s"])),
                   "overhead_all_running_ms": round(1000 * (volumes["all_running_s"] - plain["all_running_s"]))}
            log(f"round {r + 1}: {rnd}")
            result["rounds"].append(rnd)
        rounds = result["rounds"]
        result["overhead_median_ms"] = statistics.median(r["overhead_median_ms"] for r in rounds)
        result["overhead_all_running_ms"] = statistics.median(r["overhead_all_running_ms"] for r in rounds)
        await asyncio.sleep(3)  # housekeeping removes the pod directories
        result["mounts_left"] = tmpfs_left(tmp / "data")
        log(f"result: {result}")
    except Exception:
        traceback.print_exc()
        result["error"] = traceback.format_exc()
    finally:
        await cluster.stop()
        if fake.poll() is None:
            fake.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                fake.wait(10)
            if fake.poll() is None:
                fake.kill()
                fake.wait()
        await asyncio.to_thread(unmount_left, tmp)  # never leave a mount behind
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    result = asyncio.run(run(args))
    save_json(args.json, result)
    return 0 if "error" not in result and not result.get("mounts_left") else 1


if __name__ == "__main__":
    sys.exit(main())
