"""Image garbage collection: thresholds, LRU order, in-use and pinned images kept, ages, events, reclaim.

Runs against the fake CRI runtime (its ImageFsInfo) through the real CRI client; the image file
system's capacity is a test-controlled stats function, the clock a FakeClock.
"""

from __future__ import annotations

from pykubelet.agent.images.gc import IMAGE_GC_TOTAL, GCPolicy, ImageGCManager, bytes_to_free
from pykubelet.cri import pb
from pykubelet.fakecri import FakeRuntime
from pykubelet.fakecri.inprocess import InProcessCRIClient
from tests.fakes import FakeClock, FakeEventRecorder

MB = 1_000_000
PAUSE = "registry.k8s.io/pause:3.9"


def node_ref() -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "n1"}}


class Node:
    """A fake runtime whose image filesystem holds `capacity` bytes, fully used by its images."""

    def __init__(self, capacity: int = 100 * MB, policy: GCPolicy | None = None, **kw: object) -> None:
        self.fake = FakeRuntime(images=())
        self.fake.add_image(PAUSE, size=1 * MB)
        self.client = InProcessCRIClient(self.fake)
        self.capacity = capacity
        self.clock = FakeClock(10_000.0)
        self.events = FakeEventRecorder()
        self.gc = ImageGCManager(self.client, self.events, node_ref, policy or GCPolicy(90, 50, min_age=0),
                                 sandbox_image=PAUSE, fs_stats=self.stats, clock=self.clock, **kw)  # type: ignore[arg-type]

    def stats(self, mount: str) -> tuple[int, int]:
        used = sum(i.size for i in self.fake.images.values())
        return self.capacity, max(0, self.capacity - used)

    def add(self, ref: str, size: int) -> None:
        self.fake.add_image(ref, size=size)

    def tags(self) -> set[str]:
        return {t for i in self.fake.images.values() for t in i.repo_tags}

    async def use(self, ref: str, *, running: bool = True) -> None:
        cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p", namespace="d", uid="u" + ref[-3:]))
        sid = await self.client.run_pod_sandbox(cfg)
        cid = await self.client.create_container(
            sid, pb.ContainerConfig(metadata=pb.ContainerMetadata(name="c"), image=pb.ImageSpec(image=ref),
                                    command=["sleep", "1"]), cfg)
        await self.client.start_container(cid)
        if not running:
            await self.client.stop_container(cid, 0)


def test_below_the_high_threshold_nothing_is_freed_and_above_it_down_to_the_low_one() -> None:
    policy = GCPolicy(85, 80)
    assert bytes_to_free(100, 16, policy) == 0  # 84 % used
    assert bytes_to_free(100, 15, policy) == 5  # 85 % used: free down to 80 %
    assert bytes_to_free(100, 0, policy) == 20


async def test_unused_images_are_removed_least_recently_used_first_until_below_the_low_threshold() -> None:
    node = Node()
    for name in ("a", "b", "c", "d"):
        node.add(f"docker.io/library/{name}:1", 20 * MB)
        node.clock.advance(10)
        await node.gc.detect(node.clock())
    # a and c were used (by containers that are gone by now), c most recently
    node.gc.records[node.fake._lookup_image("docker.io/library/a:1").id].last_used = node.clock() + 1  # type: ignore[union-attr]
    node.gc.records[node.fake._lookup_image("docker.io/library/c:1").id].last_used = node.clock() + 2  # type: ignore[union-attr]
    node.clock.advance(10)
    before = IMAGE_GC_TOTAL.labels("space")._value.get()
    assert await node.gc.garbage_collect() == 0  # 81 % used: below the high threshold (90 %)
    node.add("docker.io/library/e:1", 10 * MB)  # 91 MB used: free 41 MB to get down to 50 %
    node.clock.advance(10)
    freed = await node.gc.garbage_collect()
    # never-used images go first, oldest first (b, d, then e); a and c were used more recently
    assert node.tags() == {PAUSE, "docker.io/library/a:1", "docker.io/library/c:1"}
    assert freed == 50 * MB
    assert IMAGE_GC_TOTAL.labels("space")._value.get() - before == 3
    assert node.events.events == []


async def test_images_used_by_any_container_and_the_sandbox_image_are_never_removed() -> None:
    node = Node(capacity=28 * MB)
    node.add("docker.io/library/run:1", 10 * MB)
    node.add("docker.io/library/dead:1", 10 * MB)
    node.add("docker.io/library/spare:1", 5 * MB)
    await node.use("docker.io/library/run:1")
    await node.use("docker.io/library/dead:1", running=False)
    node.clock.advance(1)
    await node.gc.run_once()
    assert node.tags() == {PAUSE, "docker.io/library/run:1", "docker.io/library/dead:1"}
    # still 75 % used > 50 %: it could not free enough, upstream's event says so
    [(type_, reason, message)] = node.events.events
    assert (type_, reason) == ("Warning", "FreeDiskSpaceFailed")
    assert message == ("Failed to garbage collect required amount of images. Attempted to free 12000000 bytes, "
                       "but only found 5000000 bytes eligible to free.")


async def test_a_second_failed_pass_in_a_row_is_an_image_gc_failed_event() -> None:
    node = Node(capacity=10 * MB)
    node.add("docker.io/library/run:1", 9 * MB)
    await node.use("docker.io/library/run:1")
    await node.gc.run_once()
    await node.gc.run_once()
    assert node.events.reasons == ["FreeDiskSpaceFailed", "FreeDiskSpaceFailed", "ImageGCFailed"]


async def test_images_younger_than_the_minimum_age_are_kept() -> None:
    node = Node(policy=GCPolicy(50, 10, min_age=120))
    node.add("docker.io/library/old:1", 40 * MB)
    await node.gc.detect(node.clock())
    node.clock.advance(200)
    node.add("docker.io/library/new:1", 40 * MB)
    await node.gc.run_once()
    assert node.tags() == {PAUSE, "docker.io/library/new:1"}


async def test_images_unused_for_longer_than_the_maximum_age_are_removed_once_that_long_after_start() -> None:
    node = Node(policy=GCPolicy(100, 99, min_age=0, max_age=600))
    node.add("docker.io/library/idle:1", 1 * MB)
    before = IMAGE_GC_TOTAL.labels("age")._value.get()
    node.clock.advance(300)
    await node.gc.run_once()
    assert "docker.io/library/idle:1" in node.tags()  # the agent started less than maxAge ago
    node.clock.advance(400)
    await node.gc.run_once()
    assert node.tags() == {PAUSE}
    assert IMAGE_GC_TOTAL.labels("age")._value.get() - before == 1


async def test_an_agent_restart_starts_image_ages_from_now() -> None:
    node = Node(policy=GCPolicy(50, 10, min_age=120))
    node.add("docker.io/library/old:1", 60 * MB)
    node.clock.advance(10_000)  # the image is old, but the (new) agent sees it for the first time
    await node.gc.run_once()
    assert "docker.io/library/old:1" in node.tags()
    node.clock.advance(121)
    await node.gc.run_once()
    assert "docker.io/library/old:1" not in node.tags()


async def test_reclaim_for_disk_pressure_removes_every_unused_image_and_returns_the_bytes() -> None:
    node = Node(policy=GCPolicy(100, 99, min_age=0))
    node.add("docker.io/library/a:1", 3 * MB)
    node.add("docker.io/library/b:1", 4 * MB)
    node.add("docker.io/library/run:1", 5 * MB)
    await node.use("docker.io/library/run:1")
    node.clock.advance(1)
    assert await node.gc.reclaim("memory.available") == 0
    assert await node.gc.reclaim("imagefs.available") == 7 * MB
    assert node.tags() == {PAUSE, "docker.io/library/run:1"}


async def test_a_runtime_whose_image_filesystem_is_not_on_this_host_skips_the_space_rule() -> None:
    node = Node()

    def missing(mount: str) -> tuple[int, int]:
        raise FileNotFoundError(mount)

    node.gc.fs_stats = missing
    node.add("docker.io/library/a:1", 99 * MB)
    await node.gc.run_once()
    await node.gc.run_once()
    assert "docker.io/library/a:1" in node.tags() and node.events.events == []
