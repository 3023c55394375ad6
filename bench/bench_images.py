"""Benchmark: image pulls through the local mirror, and one image GC pass over 200 images.

1. **Pull policy cost** (needs root and containerd): on a private containerd with the offline images and
   `pykubelet up`'s mirror in front of docker.io, what the image manager does per container for an image
   that is already present: ``IfNotPresent`` = one ImageStatus; ``Always`` = PullImage (resolved through
   the mirror: a manifest HEAD/GET on 127.0.0.1, nothing to download) + ImageStatus. Goal: Always costs
   ≤ 50 ms more per pod.
2. **Image GC pass** (no root): the fake CRI runtime with 200 images (100 used by containers), through
   the real CRI client in-process; one pass that must free half the disk (removes ~100 images) and one
   pass below the threshold (detection only). Goal ≤ 1 s.

Usage: ``python bench/bench_images.py [--runs 30] [--skip-pull]``; results go to docs/images.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bench_containerd, log

from pykubelet.agent.images.gc import GCPolicy, ImageGCManager
from pykubelet.cri import CRIClient, pb
from pykubelet.fakecri import FakeRuntime
from pykubelet.fakecri.inprocess import InProcessCRIClient
from pykubelet.up.images import build_all
from pykubelet.up.registry import DEFAULT_MIRRORED, LocalRegistry, write_mirror_hosts_toml

IMAGE = "docker.io/library/busybox:1.36"


def _fmt(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[int(0.9 * (len(values) - 1))]
    return f"median {statistics.median(values) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms"


async def bench_pull(runs: int) -> None:
    async with bench_containerd() as cd:
        reg = LocalRegistry(cd.data_dir / "registry")
        reg.start()
        try:
            for r in DEFAULT_MIRRORED:
                write_mirror_hosts_toml(cd.registry_config_dir, r, reg.host)
            reg.mirror_offline_images(build_all())
            async with CRIClient(cd.endpoint) as cri:
                if_not_present, always = [], []
                for _ in range(runs):
                    t = time.perf_counter()
                    await cri.image_status(IMAGE)
                    if_not_present.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    await cri.pull_image(IMAGE)
                    await cri.image_status(IMAGE)
                    always.append(time.perf_counter() - t)
            extra = statistics.median(always) - statistics.median(if_not_present)
            log(f"IfNotPresent (present): {_fmt(if_not_present)}")
            log(f"Always through the mirror: {_fmt(always)}")
            log(f"extra per pod with Always: {extra * 1000:.1f} ms (goal <= 50 ms)")
        finally:
            reg.stop()


async def bench_gc(n: int = 200) -> None:
    fake = FakeRuntime(images=())
    client = InProcessCRIClient(fake)
    for i in range(n):
        fake.add_image(f"docker.io/library/img{i}:1", size=10_000_000)
    cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p", namespace="d", uid="u"))
    sid = await client.run_pod_sandbox(cfg)
    for i in range(0, n, 2):  # every other image in use
        c = pb.ContainerConfig(metadata=pb.ContainerMetadata(name=f"c{i}"),
                               image=pb.ImageSpec(image=f"docker.io/library/img{i}:1"))
        await client.create_container(sid, c, cfg)
    capacity = n * 10_000_000

    def stats(_mount: str) -> tuple[int, int]:
        used = sum(i.size for i in fake.images.values())
        return capacity, capacity - used

    gc = ImageGCManager(client, None, dict, GCPolicy(90, 50, min_age=0), fs_stats=stats,
                        clock=lambda: time.time() + 3600)
    t = time.perf_counter()
    freed = await gc.garbage_collect()
    heavy = time.perf_counter() - t
    t = time.perf_counter()
    await gc.garbage_collect()
    light = time.perf_counter() - t
    log(f"GC pass over {n} images freeing {freed // 10_000_000} of them: {heavy * 1000:.0f} ms (goal <= 1 s)")
    log(f"GC pass over {len(fake.images)} images below the threshold: {light * 1000:.0f} ms")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--skip-pull", action="store_true")
    args = p.parse_args()
    asyncio.run(bench_gc())
    if not args.skip_pull:
        if os.geteuid() != 0:
            log("pull benchmark skipped: needs root and containerd")
        else:
            asyncio.run(bench_pull(args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
