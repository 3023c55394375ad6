"""Image garbage collection (upstream ``pkg/kubelet/images/image_gc_manager.go``).

Every ``imageGCPeriod`` (5 min upstream) one pass:

1. *detect*: list the runtime's images and every container (running or not); an image used by any
   container gets ``last_used = now``; an image seen for the first time gets ``first_detected =
   now`` (and no ``last_used``). Nothing is persisted: after an agent restart every image starts
   from "now" as upstream's do, so ``imageMinimumGCAge`` protects them again and the age rule
   waits; records of vanished images go.
2. *age*: with ``imageMaximumGCAge`` > 0, once that long has passed since the agent started,
   unused images not used for longer than it are removed (metric reason ``age``).
3. *space*: the image filesystem's usage (CRI ``ImageFsInfo`` names the mount point; its capacity
   and free space come from ``statvfs`` as upstream's cadvisor does) at or above
   ``imageGCHighThresholdPercent`` frees ``capacity * (100 - low) / 100 - available`` bytes by
   removing unused images least recently used first (ties: first detected first), skipping those
   younger than ``imageMinimumGCAge`` (just pulled, about to be used); freeing too little is a
   ``FreeDiskSpaceFailed`` node event with upstream's message.

Never removed: an image any container uses, the pinned sandbox image, and images the runtime marks
``pinned``. A failed pass logs once and records ``ImageGCFailed`` only when it fails again in a row
(upstream ``StartGarbageCollection``). ``kubelet_image_garbage_collected_total{reason}`` counts
removals. :meth:`ImageGCManager.reclaim` is the eviction manager's hook (``NodeResourceReclaimer``):
it removes every unused image regardless of thresholds (upstream ``DeleteUnusedImages``) and
returns the bytes freed.

The decision (which images, in which order) is the pure function :func:`eviction_order` /
:func:`plan_space`; the manager does the I/O.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from pykubelet.agent import metrics
from pykubelet.cri import pb

log = logging.getLogger(__name__)

REASON_AGE = "age"
REASON_SPACE = "space"
DEFAULT_PERIOD = 300.0  # upstream ImageGCPeriod
DEFAULT_SANDBOX_IMAGE = "registry.k8s.io/pause:3.9"  # upstream's default --pod-infra-container-image

IMAGE_GC_TOTAL = Counter(
    "kubelet_image_garbage_collected_total",
    "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
    ["reason"], registry=metrics.REGISTRY,
)

FsStats = Callable[[str], tuple[int, int]]  # mount point -> (capacity bytes, available bytes)


def statvfs_stats(path: str) -> tuple[int, int]:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@dataclass(frozen=True)
class GCPolicy:
    high_threshold_percent: int = 85
    low_threshold_percent: int = 80
    min_age: float = 120.0
    max_age: float = 0.0  # 0 = disabled


@dataclass
class ImageRecord:
    first_detected: float
    last_used: float
    size: int = 0
    pinned: bool = False
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Candidate:
    id: str
    last_used: float
    first_detected: float
    size: int


def eviction_order(records: dict[str, ImageRecord], in_use: set[str]) -> list[Candidate]:
    """Unused, unpinned images, least recently used first (then first detected first)."""
    out = [Candidate(i, r.last_used, r.first_detected, r.size)
           for i, r in records.items() if i not in in_use and not r.pinned]
    out.sort(key=lambda c: (c.last_used, c.first_detected, c.id))
    return out


def bytes_to_free(capacity: int, available: int, policy: GCPolicy) -> int:
    """0 below the high threshold, else the bytes to free to get down to the low threshold."""
    if capacity <= 0:
        return 0
    available = min(available, capacity)
    usage = 100 - (available * 100) // capacity
    if usage < policy.high_threshold_percent:
        return 0
    return capacity * (100 - policy.low_threshold_percent) // 100 - available


def plan_space(candidates: Iterable[Candidate], amount: int, now: float, min_age: float) -> list[Candidate]:
    """Which candidates (in order) to remove to free ``amount`` bytes (upstream freeSpace)."""
    chosen: list[Candidate] = []
    freed = 0
    for c in candidates:
        if c.last_used >= now or now - c.first_detected < min_age:
            continue
        chosen.append(c)
        freed += c.size
        if freed >= amount:
            break
    return chosen


class ImageGCError(Exception):
    pass


class ImageGCManager:
    """Keeps image records and removes images per :class:`GCPolicy`."""

    def __init__(
        self,
        runtime: Any,
        recorder: Any,
        node_ref: Callable[[], dict[str, Any]],
        policy: GCPolicy,
        *,
        sandbox_image: str = "",
        fs_stats: FsStats = statvfs_stats,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runtime = runtime
        self.recorder = recorder
        self.node_ref = node_ref
        self.policy = policy
        self.sandbox_image = sandbox_image
        self.fs_stats = fs_stats
        self.clock = clock
        self.records: dict[str, ImageRecord] = {}
        self.began = clock()
        self._prev_failed = False
        self._warned_mount = False

    # ---------------------------------------------------------------- detection
    async def _sandbox_image(self) -> str:
        """The runtime's sandbox image: containerd's verbose CRI Status names it (``sandboxImage``)."""
        if not self.sandbox_image:
            try:
                info = (await self.runtime.status(verbose=True)).info.get("config", "")
                self.sandbox_image = str(json.loads(info).get("sandboxImage") or "") if info else ""
            except Exception as e:
                log.debug("sandbox image from runtime status: %s", e)
            self.sandbox_image = self.sandbox_image or DEFAULT_SANDBOX_IMAGE
        return self.sandbox_image

    async def detect(self, now: float) -> set[str]:
        """Refresh the records; returns the ids of images in use (containers + sandbox image)."""
        sandbox_image = await self._sandbox_image()
        images: list[pb.Image] = await self.runtime.list_images()
        containers: list[pb.Container] = await self.runtime.list_containers()
        refs: dict[str, str] = {}
        for img in images:
            for r in (img.id, *img.repo_tags, *img.repo_digests):
                refs[r] = img.id
        in_use: set[str] = set()
        for c in containers:
            for r in (c.image_ref, c.image.image):
                if r in refs:
                    in_use.add(refs[r])
                    break
                if r.startswith("sha256:"):
                    in_use.add(r)
        if sandbox_image:
            sid = refs.get(sandbox_image) or refs.get(_normalize(sandbox_image))
            if sid:
                in_use.add(sid)
        seen: set[str] = set()
        for img in images:
            seen.add(img.id)
            rec = self.records.get(img.id)
            if rec is None:
                rec = self.records[img.id] = ImageRecord(first_detected=now, last_used=0.0)
            if img.id in in_use:
                rec.last_used = now
            rec.size = int(img.size)
            rec.pinned = bool(img.pinned)
            rec.tags = tuple(img.repo_tags)
        for gone in set(self.records) - seen:
            del self.records[gone]
        return in_use

    # ---------------------------------------------------------------- removal
    async def _free(self, c: Candidate, reason: str) -> bool:
        log.info("removing image %s (%s) to free %d bytes, reason %s",
                 c.id, ",".join(self.records[c.id].tags) if c.id in self.records else "", c.size, reason)
        try:
            await self.runtime.remove_image(c.id)
        except Exception as e:
            log.warning("image garbage collection: removing %s failed: %s", c.id, e)
            return False
        self.records.pop(c.id, None)
        IMAGE_GC_TOTAL.labels(reason).inc()
        return True

    async def _free_old(self, candidates: list[Candidate], now: float) -> list[Candidate]:
        max_age = self.policy.max_age
        if max_age <= 0 or now - self.began <= max_age:
            return candidates
        left = []
        for c in candidates:
            if now - c.last_used > max_age and await self._free(c, REASON_AGE):
                continue
            left.append(c)
        return left

    async def _image_fs(self) -> tuple[int, int] | None:
        """(capacity, available) of the image filesystem; None when its mount point is not on this host
        (a fake runtime's made-up path): the space rule is then skipped, said once in the log."""
        resp: pb.ImageFsInfoResponse = await self.runtime.image_fs_info()
        if not resp.image_filesystems:
            raise ImageGCError("the runtime reported no image filesystem")
        mount = resp.image_filesystems[0].fs_id.mountpoint
        try:
            return await asyncio.to_thread(self.fs_stats, mount)
        except FileNotFoundError:
            if not self._warned_mount:
                log.warning("image GC: the runtime's image filesystem %s is not on this host; "
                            "only imageMaximumGCAge applies", mount)
                self._warned_mount = True
            return None

    async def garbage_collect(self) -> int:
        """One pass; returns the bytes freed for space. Raises ImageGCError when it cannot free enough."""
        now = self.clock()
        in_use = await self.detect(now)
        candidates = await self._free_old(eviction_order(self.records, in_use), now)
        fs = await self._image_fs()
        if fs is None:
            return 0
        capacity, available = fs
        if capacity == 0:
            msg = "invalid capacity 0 on image filesystem"
            self.recorder.event(self.node_ref(), "Warning", "InvalidDiskCapacity", msg)
            raise ImageGCError(msg)
        amount = bytes_to_free(capacity, available, self.policy)
        if amount <= 0:
            return 0
        usage = 100 - (min(available, capacity) * 100) // capacity
        log.info("Disk usage on image filesystem is over the high threshold, trying to free bytes down to the "
                 "low threshold usage=%d highThreshold=%d amountToFree=%d lowThreshold=%d", usage,
                 self.policy.high_threshold_percent, amount, self.policy.low_threshold_percent)
        freed = 0
        for c in plan_space(candidates, amount, now, self.policy.min_age):
            if await self._free(c, REASON_SPACE):
                freed += c.size
        if freed < amount:
            msg = (f"Failed to garbage collect required amount of images. Attempted to free {amount} bytes, "
                   f"but only found {freed} bytes eligible to free.")
            self.recorder.event(self.node_ref(), "Warning", "FreeDiskSpaceFailed", msg)
            raise ImageGCError(msg)
        return freed

    async def run_once(self) -> None:
        """The periodic task's body: a failure twice in a row is an ImageGCFailed event."""
        try:
            await self.garbage_collect()
        except Exception as e:
            if self._prev_failed:
                log.error("Image garbage collection failed multiple times in a row: %s", e)
                self.recorder.event(self.node_ref(), "Warning", "ImageGCFailed", str(e))
            else:
                log.error("Image garbage collection failed once. Stats initialization may not have completed "
                          "yet: %s", e)
            self._prev_failed = True
            return
        self._prev_failed = False

    async def delete_unused_images(self) -> int:
        """Remove every unused image old enough (upstream DeleteUnusedImages); returns bytes freed."""
        now = self.clock()
        in_use = await self.detect(now)
        freed = 0
        for c in plan_space(eviction_order(self.records, in_use), 1 << 62, now, self.policy.min_age):
            if await self._free(c, REASON_SPACE):
                freed += c.size
        return freed

    async def reclaim(self, resource: str) -> int:
        """NodeResourceReclaimer: free disk for an eviction signal on the node or image filesystem."""
        if resource.startswith(("imagefs.", "nodefs.", "containerfs.")):
            return await self.delete_unused_images()
        return 0


def _normalize(ref: str) -> str:
    """``busybox`` -> ``docker.io/library/busybox:latest`` (how containerd names images)."""
    name = ref
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = "docker.io/" + (name if "/" in name else "library/" + name)
    last = name.rsplit("/", 1)[-1]
    if "@" not in name and ":" not in last:
        name += ":latest"
    return name
