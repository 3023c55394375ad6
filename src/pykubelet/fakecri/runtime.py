"""In-memory CRI v1 runtime (RuntimeService + ImageService servicers for grpc.aio).

Plays the role of upstream's fake remote runtime used by kubemark hollow nodes: the kubelet talks
real CRI gRPC to it, but nothing is executed. Semantics follow the CRI api.proto comments and what
containerd 1.6 does, so the agent cannot tell the difference for the parts it relies on:

* Sandboxes are READY after RunPodSandbox and NOTREADY after StopPodSandbox (which also kills their
  containers). Non-host-network sandboxes get an IP from 198.18.0.0/15; host-network ones none
  (the kubelet then uses the node IP). The namespace options are echoed in the status, because the
  kubelet recreates sandboxes whose network mode differs from the pod's.
* Names are reserved like containerd (``name_ns_uid_attempt`` for sandboxes,
  ``name_sandbox_ns_uid_attempt`` for containers): a duplicate create fails until removal.
* Containers go CREATED → RUNNING → EXITED. Lifetime comes from the command line (see
  behaviour.py). Time-based exits are evaluated lazily on every RPC from a heap of planned exits
  (O(1) when none is due), so no timers/tasks exist per container and thousands of pods stay cheap.
  The ``PodSandbox``/``Container`` messages of List* answers are built once per state, not per call,
  and a ListPodSandbox/ListContainers answer is reused while nothing changed (a ``generation``
  counter moves on every call that is not read-only and on every exit): a node relists every
  sandbox and container each second, hollow nodes do it a hundred times over in one process.
  A List* filtered by the pod uid label (what a kubelet asks for one pod's status) starts from an
  index of that label instead of scanning every sandbox and container (O(n²) over a 1,000-pod start).
  StopContainer kills immediately (exit 137, reason "Error"); a natural exit 0 has reason
  "Completed", non-zero "Error", as in containerd.
* CreateContainer requires the image to be present (containerd does not pull implicitly).
* List* filters follow the spec: every set field must match (AND), ``id`` exactly, ``state`` only
  when present, ``label_selector`` as exact-match pairs, ``pod_sandbox_id`` exactly.
* RemovePodSandbox/RemoveContainer/RemoveImage are idempotent for unknown ids (spec); Status-type
  calls, StopContainer and StopPodSandbox on unknown ids answer NOT_FOUND exactly like containerd
  1.6 (measured), so the agent must treat NotFound on stop as "already gone" like upstream does.
* PullImage of a ref containing "nonexistent" or "invalid" fails like containerd does for a
  missing image: code UNKNOWN, message "failed to pull and unpack image ...: not found".
* Logs: when the sandbox's log_directory exists, the container's log file is created at
  ``log_directory/log_path`` and CRI-format lines (``<RFC3339Nano> stdout F <line>``) are written
  at start (``echo`` output, or one line saying the fake container started).
* Exec/Attach/PortForward answer UNIMPLEMENTED (no streaming server), GetContainerEvents too, like
  containerd 1.6; ExecSync always succeeds with empty output.
"""

from __future__ import annotations

import hashlib
import heapq
import ipaddress
import os
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeAlias

import grpc
import grpc.aio
from cri_api.v1 import api_pb2 as pb
from cri_api.v1 import api_pb2_grpc as pb_grpc

from pykubelet.fakecri.behaviour import Behaviour, behaviour_for

RUNTIME_NAME = "fakecri"
RUNTIME_VERSION = "0.1.0"
RUNTIME_API_VERSION = "v1"

PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
BUSYBOX_IMAGE = "docker.io/library/busybox:latest"
DEFAULT_IMAGES = (PAUSE_IMAGE, BUSYBOX_IMAGE)

EXIT_KILLED = 137
POD_UID_LABEL = "io.kubernetes.pod.uid"  # what a kubelet filters one pod's sandboxes and containers by

_POD_NETWORK = ipaddress.ip_network("198.18.0.0/15")

# Calls that change nothing the List* answers show (everything else moves ``generation``).
_READ_ONLY = frozenset({
    "Version", "Status", "PodSandboxStatus", "ListPodSandbox", "ContainerStatus", "ListContainers",
    "ExecSync", "ContainerStats", "ListContainerStats", "PodSandboxStats", "ListPodSandboxStats",
    "ListImages", "ImageStatus", "ImageFsInfo", "ReopenContainerLog",
})

# grpc.aio.ServicerContext; grpc ships no type stubs, so keep it opaque for mypy.
Context: TypeAlias = Any


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def _now_ns() -> int:
    return time.time_ns()


def _rfc3339nano(ns: int) -> str:
    secs, frac = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def normalize_image(ref: str) -> str:
    """docker-style normalisation ("busybox" → "docker.io/library/busybox:latest")."""
    ref = ref.strip()
    if not ref or ref.startswith("sha256:"):
        return ref
    name, _, digest = ref.partition("@")
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name}" if rest else f"docker.io/library/{name}"
        if name.startswith("docker.io/") and name.count("/") == 1:
            name = "docker.io/library/" + name[len("docker.io/") :]
    if digest:
        return f"{name}@{digest}"
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def _repo_of(ref: str) -> str:
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: name.rfind(":")]
    return name


@dataclass
class FakeImage:
    id: str
    repo_tags: list[str]
    repo_digests: list[str]
    size: int
    pinned: bool = False

    def to_pb(self) -> pb.Image:
        return pb.Image(
            id=self.id,
            repo_tags=self.repo_tags,
            repo_digests=self.repo_digests,
            size=self.size,
            pinned=self.pinned,
            spec=pb.ImageSpec(image=self.id),
        )

    @property
    def ref(self) -> str:
        return self.repo_digests[0] if self.repo_digests else self.id


@dataclass
class FakeSandbox:
    id: str
    config: pb.PodSandboxConfig
    runtime_handler: str
    created_at: int
    ip: str
    reserved_name: str
    state: int = pb.SANDBOX_READY
    containers: set[str] = field(default_factory=set)
    _pb: pb.PodSandbox | None = field(default=None, repr=False, compare=False)

    def to_pb(self) -> pb.PodSandbox:
        """The list entry, cached until the state changes (callers copy it into their response)."""
        if self._pb is not None and self._pb.state == self.state:
            return self._pb
        self._pb = pb.PodSandbox(
            id=self.id,
            metadata=self.config.metadata,
            state=self.state,  # type: ignore[arg-type]
            created_at=self.created_at,
            labels=self.config.labels,
            annotations=self.config.annotations,
            runtime_handler=self.runtime_handler,
        )
        return self._pb

    def status_pb(self) -> pb.PodSandboxStatus:
        st = pb.PodSandboxStatus(
            id=self.id,
            metadata=self.config.metadata,
            state=self.state,  # type: ignore[arg-type]
            created_at=self.created_at,
            network=pb.PodSandboxNetworkStatus(ip=self.ip),
            labels=self.config.labels,
            annotations=self.config.annotations,
            runtime_handler=self.runtime_handler,
        )
        st.linux.namespaces.options.CopyFrom(self.config.linux.security_context.namespace_options)
        return st


@dataclass
class FakeContainer:
    id: str
    sandbox_id: str
    config: pb.ContainerConfig
    image: FakeImage
    created_at: int
    log_path: str
    reserved_name: str
    behaviour: Behaviour
    state: int = pb.CONTAINER_CREATED
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    exit_due_ns: int | None = None
    resources: pb.LinuxContainerResources | None = None
    _pb: pb.Container | None = field(default=None, repr=False, compare=False)

    def to_pb(self) -> pb.Container:
        """The list entry, cached until the state changes (callers copy it into their response)."""
        if self._pb is not None and self._pb.state == self.state:
            return self._pb
        self._pb = pb.Container(
            id=self.id,
            pod_sandbox_id=self.sandbox_id,
            metadata=self.config.metadata,
            image=pb.ImageSpec(image=self.image.id),
            image_ref=self.image.id,
            image_id=self.image.id,
            state=self.state,  # type: ignore[arg-type]
            created_at=self.created_at,
            labels=self.config.labels,
            annotations=self.config.annotations,
        )
        return self._pb

    def status_pb(self) -> pb.ContainerStatus:
        st = pb.ContainerStatus(
            id=self.id,
            metadata=self.config.metadata,
            state=self.state,  # type: ignore[arg-type]
            created_at=self.created_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            exit_code=self.exit_code,
            image=pb.ImageSpec(image=self.image.repo_tags[0] if self.image.repo_tags else self.image.id),
            image_ref=self.image.ref,
            image_id=self.image.id,
            reason=self.reason,
            message=self.message,
            labels=self.config.labels,
            annotations=self.config.annotations,
            mounts=self.config.mounts,
            log_path=self.log_path,
        )
        res = self.resources if self.resources is not None else self.config.linux.resources
        st.resources.linux.CopyFrom(res)
        return st


class FakeRuntime(pb_grpc.RuntimeServiceServicer, pb_grpc.ImageServiceServicer):  # type: ignore[misc]
    """State of the fake runtime plus both CRI servicers. All handlers run on the event loop, so
    mutations are atomic without locks."""

    def __init__(self, *, images: tuple[str, ...] = DEFAULT_IMAGES, clock: Any = None,
                 pod_cidr: str | None = None) -> None:
        """``pod_cidr`` (inside 198.18.0.0/15) is where sandbox IPs come from; one per runtime lets
        many fake runtimes (hollow nodes) hand out distinct pod IPs, like one CNI range per node."""
        self.clock = clock or _now_ns
        self.network = ipaddress.ip_network(pod_cidr) if pod_cidr else _POD_NETWORK
        if not self.network.subnet_of(_POD_NETWORK):  # type: ignore[arg-type]
            raise ValueError(f"fakecri: pod CIDR {pod_cidr} is not inside {_POD_NETWORK}")
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.containers: dict[str, FakeContainer] = {}
        self.images: dict[str, FakeImage] = {}  # by id
        self._image_refs: dict[str, str] = {}  # tag / digest → id
        self._names: dict[str, str] = {}  # reserved name → id
        self._pending: dict[str, FakeContainer] = {}  # running containers with a planned exit
        self._exits: list[tuple[int, str]] = []  # heap of (exit_due_ns, container id); stale entries skipped
        self._free_ips: deque[str] = deque()
        self._next_ip = int(self.network.network_address) + 2  # .1 is the gateway, as with CNI
        self._used_ips: set[str] = set()
        # pod uid label → ids (insertion-ordered), to answer one pod's filtered List* without a scan
        self._sandboxes_by_uid: dict[str, dict[str, None]] = {}
        self._containers_by_uid: dict[str, dict[str, None]] = {}
        self.runtime_ready = True
        self.network_ready = True
        self.calls: dict[str, int] = {}
        self.generation = 0  # moves on every change of sandboxes or containers (see _run, _finish)
        self._lists: dict[tuple[str, bytes], tuple[int, Any]] = {}  # (method, request) → (generation, answer)
        for ref in images:
            self.add_image(ref)

    # ------------------------------------------------------------------ helpers (also for tests)

    def add_image(self, ref: str, size: int = 1_000_000) -> FakeImage:
        norm = normalize_image(ref)
        existing = self._lookup_image(norm)
        if existing is not None:
            return existing
        h = hashlib.sha256(norm.encode()).hexdigest()
        image_id = f"sha256:{h}"
        digest = "sha256:" + hashlib.sha256(("manifest:" + norm).encode()).hexdigest()
        if "@" in norm:
            tags: list[str] = []
            digests = [norm]
        else:
            tags = [norm]
            digests = [f"{_repo_of(norm)}@{digest}"]
        img = FakeImage(id=image_id, repo_tags=tags, repo_digests=digests, size=size,
                        pinned=norm == normalize_image(PAUSE_IMAGE))
        self.images[image_id] = img
        for r in (*tags, *digests, image_id):
            self._image_refs[r] = image_id
        return img

    def _lookup_image(self, ref: str) -> FakeImage | None:
        if not ref:
            return None
        iid = self._image_refs.get(ref) or self._image_refs.get(normalize_image(ref))
        if iid is None and ref.startswith("sha256:") is False and len(ref) >= 12:
            iid = self._image_refs.get(f"sha256:{ref}")
        return self.images.get(iid) if iid else None

    def _allocate_ip(self) -> str:
        if self._free_ips:
            ip = self._free_ips.popleft()
        else:
            while True:
                if self._next_ip >= int(self.network.broadcast_address):
                    raise _Abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "fakecri: pod IP range exhausted")
                candidate = ipaddress.ip_address(self._next_ip)
                self._next_ip += 1
                last = int(candidate) & 0xFF
                if last not in (0, 255):
                    ip = str(candidate)
                    break
        self._used_ips.add(ip)
        return ip

    def _release_ip(self, ip: str) -> None:
        if ip and ip in self._used_ips:
            self._used_ips.discard(ip)
            self._free_ips.append(ip)

    def _new_id(self) -> str:
        return secrets.token_hex(32)

    def _tick(self) -> None:
        """Apply planned exits whose time has come (O(1) when none is due)."""
        if not self._exits:
            return
        now = self.clock()
        while self._exits and self._exits[0][0] <= now:
            due, cid = heapq.heappop(self._exits)
            c = self._pending.get(cid)
            if c is not None and c.exit_due_ns == due:  # else stopped or removed meanwhile
                self._finish(c, c.behaviour.exit_code, at=due)

    def _finish(self, c: FakeContainer, code: int, *, at: int | None = None, reason: str | None = None) -> None:
        self.generation += 1
        self._pending.pop(c.id, None)
        if c.state != pb.CONTAINER_RUNNING:
            return
        c.state = pb.CONTAINER_EXITED
        c.finished_at = at if at is not None else self.clock()
        c.exit_code = code
        c.reason = reason or ("Completed" if code == 0 else "Error")
        c.exit_due_ns = None

    def _write_log(self, c: FakeContainer, sb: FakeSandbox, lines: list[str]) -> None:
        log_dir = sb.config.log_directory
        if not log_dir or not c.config.log_path or not os.path.isdir(log_dir):
            return
        try:
            os.makedirs(os.path.dirname(c.log_path), exist_ok=True)
            ts = _rfc3339nano(self.clock())
            with open(c.log_path, "a", encoding="utf-8") as f:
                for line in lines:
                    f.write(f"{ts} stdout F {line}\n")
        except OSError:
            pass

    def _sandbox(self, sid: str) -> FakeSandbox:
        sb = self.sandboxes.get(sid)
        if sb is None:
            raise _Abort(grpc.StatusCode.NOT_FOUND, f'an error occurred when try to find sandbox "{sid}": not found')
        return sb

    def _container(self, cid: str) -> FakeContainer:
        c = self.containers.get(cid)
        if c is None:
            raise _Abort(grpc.StatusCode.NOT_FOUND, f'an error occurred when try to find container "{cid}": not found')
        return c

    @staticmethod
    def _index_add(index: dict[str, dict[str, None]], labels: Any, oid: str) -> None:
        uid = labels.get(POD_UID_LABEL)
        if uid:
            index.setdefault(uid, {})[oid] = None

    @staticmethod
    def _index_remove(index: dict[str, dict[str, None]], labels: Any, oid: str) -> None:
        uid = labels.get(POD_UID_LABEL) or ""
        ids = index.get(uid)
        if ids is not None:
            ids.pop(oid, None)
            if not ids:
                del index[uid]

    def _remove_container(self, c: FakeContainer) -> None:
        self._pending.pop(c.id, None)
        if self.containers.pop(c.id, None) is not None:
            self._index_remove(self._containers_by_uid, c.config.labels, c.id)
        self._names.pop(c.reserved_name, None)
        sb = self.sandboxes.get(c.sandbox_id)
        if sb is not None:
            sb.containers.discard(c.id)

    @staticmethod
    def _labels_match(labels: Any, selector: Any) -> bool:
        return all(labels.get(k) == v for k, v in selector.items())

    async def _run(self, name: str, context: Context, fn: Any, *args: Any) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name not in _READ_ONLY:
            self.generation += 1
        self._tick()
        try:
            return fn(*args)
        except _Abort as e:
            await context.abort(e.code, e.details)

    # ------------------------------------------------------------------ RuntimeService

    async def Version(self, request: pb.VersionRequest, context: Context) -> pb.VersionResponse:
        return await self._run("Version", context, lambda: pb.VersionResponse(
            version="0.1.0", runtime_name=RUNTIME_NAME, runtime_version=RUNTIME_VERSION,
            runtime_api_version=RUNTIME_API_VERSION))

    async def Status(self, request: pb.StatusRequest, context: Context) -> pb.StatusResponse:
        def do() -> pb.StatusResponse:
            conds = [
                pb.RuntimeCondition(type="RuntimeReady", status=self.runtime_ready,
                                    reason="" if self.runtime_ready else "FakeRuntimeNotReady"),
                pb.RuntimeCondition(type="NetworkReady", status=self.network_ready,
                                    reason="" if self.network_ready else "NetworkPluginNotReady",
                                    message="" if self.network_ready else "fakecri: network not ready"),
            ]
            return pb.StatusResponse(status=pb.RuntimeStatus(conditions=conds))
        return await self._run("Status", context, do)

    async def RunPodSandbox(self, request: pb.RunPodSandboxRequest, context: Context) -> pb.RunPodSandboxResponse:
        def do() -> pb.RunPodSandboxResponse:
            cfg = request.config
            md = cfg.metadata
            if not md.name or not md.namespace:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "sandbox config must include metadata name and namespace")
            rname = f"{md.name}_{md.namespace}_{md.uid}_{md.attempt}"
            if rname in self._names:
                raise _Abort(grpc.StatusCode.ALREADY_EXISTS,
                             f'failed to reserve sandbox name "{rname}": name "{rname}" is reserved for "{self._names[rname]}"')
            host_net = cfg.linux.security_context.namespace_options.network == pb.NODE
            sid = self._new_id()
            ip = "" if host_net else self._allocate_ip()
            sb = FakeSandbox(id=sid, config=pb.PodSandboxConfig(), runtime_handler=request.runtime_handler,
                             created_at=self.clock(), ip=ip, reserved_name=rname)
            sb.config.CopyFrom(cfg)
            self.sandboxes[sid] = sb
            self._index_add(self._sandboxes_by_uid, sb.config.labels, sid)
            self._names[rname] = sid
            return pb.RunPodSandboxResponse(pod_sandbox_id=sid)
        return await self._run("RunPodSandbox", context, do)

    async def StopPodSandbox(self, request: pb.StopPodSandboxRequest, context: Context) -> pb.StopPodSandboxResponse:
        def do() -> pb.StopPodSandboxResponse:
            sb = self._sandbox(request.pod_sandbox_id)  # containerd 1.6: NotFound for unknown ids
            for cid in list(sb.containers):
                c = self.containers[cid]
                self._finish(c, EXIT_KILLED)
            sb.state = pb.SANDBOX_NOTREADY
            return pb.StopPodSandboxResponse()
        return await self._run("StopPodSandbox", context, do)

    async def RemovePodSandbox(self, request: pb.RemovePodSandboxRequest, context: Context) -> pb.RemovePodSandboxResponse:
        def do() -> pb.RemovePodSandboxResponse:
            sb = self.sandboxes.pop(request.pod_sandbox_id, None)
            if sb is None:
                return pb.RemovePodSandboxResponse()  # idempotent
            self._index_remove(self._sandboxes_by_uid, sb.config.labels, sb.id)
            for cid in list(sb.containers):
                c = self.containers.get(cid)
                if c is not None:
                    self._finish(c, EXIT_KILLED)
                    self._remove_container(c)
            self._names.pop(sb.reserved_name, None)
            self._release_ip(sb.ip)
            return pb.RemovePodSandboxResponse()
        return await self._run("RemovePodSandbox", context, do)

    async def PodSandboxStatus(self, request: pb.PodSandboxStatusRequest, context: Context) -> pb.PodSandboxStatusResponse:
        def do() -> pb.PodSandboxStatusResponse:
            sb = self._sandbox(request.pod_sandbox_id)
            resp = pb.PodSandboxStatusResponse(status=sb.status_pb(), timestamp=self.clock())
            if request.verbose:
                resp.info["info"] = '{"runtime":"fakecri"}'
            return resp
        return await self._run("PodSandboxStatus", context, do)

    def _cached_list(self, method: str, request: Any, build: Any) -> Any:
        """The answer of an unchanged runtime to the same List* request is the same message (callers
        only read it; over gRPC it is serialized anyway)."""
        key = (method, request.SerializeToString())
        hit = self._lists.get(key)
        if hit is not None and hit[0] == self.generation:
            return hit[1]
        answer = build()
        if len(self._lists) > 32:
            self._lists.clear()
        self._lists[key] = (self.generation, answer)
        return answer

    async def ListPodSandbox(self, request: pb.ListPodSandboxRequest, context: Context) -> pb.ListPodSandboxResponse:
        def build() -> pb.ListPodSandboxResponse:
            f = request.filter if request.HasField("filter") else None
            if f is not None and f.id:
                sb = self.sandboxes.get(f.id)
                cands = [sb] if sb is not None else []
            elif f is not None and f.label_selector.get(POD_UID_LABEL):
                ids = self._sandboxes_by_uid.get(f.label_selector[POD_UID_LABEL], {})
                cands = [self.sandboxes[i] for i in ids]
            else:
                cands = list(self.sandboxes.values())
            items = []
            for sb in cands:
                if f is not None:
                    if f.HasField("state") and sb.state != f.state.state:
                        continue
                    if f.label_selector and not self._labels_match(sb.config.labels, f.label_selector):
                        continue
                items.append(sb.to_pb())
            return pb.ListPodSandboxResponse(items=items)
        return await self._run("ListPodSandbox", context, self._cached_list, "ListPodSandbox", request, build)

    async def CreateContainer(self, request: pb.CreateContainerRequest, context: Context) -> pb.CreateContainerResponse:
        def do() -> pb.CreateContainerResponse:
            sb = self._sandbox(request.pod_sandbox_id)
            if sb.state != pb.SANDBOX_READY:
                raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                             f"failed to create containerd container: sandbox {sb.id} is not ready")
            cfg = request.config
            md = cfg.metadata
            if not md.name:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "container config must include metadata")
            img = self._lookup_image(cfg.image.image)
            if img is None:
                raise _Abort(grpc.StatusCode.NOT_FOUND,
                             f'failed to get image "{cfg.image.image}": image "{cfg.image.image}" not found')
            smd = sb.config.metadata
            rname = f"{md.name}_{smd.name}_{smd.namespace}_{smd.uid}_{md.attempt}"
            if rname in self._names:
                raise _Abort(grpc.StatusCode.ALREADY_EXISTS,
                             f'failed to reserve container name "{rname}": name "{rname}" is reserved for "{self._names[rname]}"')
            cid = self._new_id()
            log_path = ""
            if cfg.log_path:
                log_path = os.path.join(sb.config.log_directory, cfg.log_path) if sb.config.log_directory else cfg.log_path
            c = FakeContainer(id=cid, sandbox_id=sb.id, config=pb.ContainerConfig(), image=img,
                              created_at=self.clock(), log_path=log_path, reserved_name=rname,
                              behaviour=behaviour_for(list(cfg.command), list(cfg.args)))
            c.config.CopyFrom(cfg)
            self.containers[cid] = c
            self._index_add(self._containers_by_uid, c.config.labels, cid)
            self._names[rname] = cid
            sb.containers.add(cid)
            return pb.CreateContainerResponse(container_id=cid)
        return await self._run("CreateContainer", context, do)

    async def StartContainer(self, request: pb.StartContainerRequest, context: Context) -> pb.StartContainerResponse:
        def do() -> pb.StartContainerResponse:
            c = self._container(request.container_id)
            if c.state != pb.CONTAINER_CREATED:
                raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                             f"container is in {pb.ContainerState.Name(c.state)} state")  # type: ignore[arg-type]
            sb = self._sandbox(c.sandbox_id)
            if sb.state != pb.SANDBOX_READY:
                raise _Abort(grpc.StatusCode.FAILED_PRECONDITION, f"sandbox container {sb.id!r} is not running")
            now = self.clock()
            c.state = pb.CONTAINER_RUNNING
            c.started_at = now
            b = c.behaviour
            lines = b.output or [f"fakecri: container {c.config.metadata.name} started"]
            self._write_log(c, sb, lines)
            if b.run_seconds is not None:
                c.exit_due_ns = now + int(b.run_seconds * 1e9)
                if b.run_seconds <= 0:
                    self._finish(c, b.exit_code, at=now)
                else:
                    self._pending[c.id] = c
                    heapq.heappush(self._exits, (c.exit_due_ns, c.id))
            return pb.StartContainerResponse()
        return await self._run("StartContainer", context, do)

    async def StopContainer(self, request: pb.StopContainerRequest, context: Context) -> pb.StopContainerResponse:
        def do() -> pb.StopContainerResponse:
            c = self._container(request.container_id)
            if c.state == pb.CONTAINER_CREATED:
                # containerd marks a never-started container exited on stop/remove paths
                c.state = pb.CONTAINER_RUNNING
            self._finish(c, EXIT_KILLED)
            return pb.StopContainerResponse()
        return await self._run("StopContainer", context, do)

    async def RemoveContainer(self, request: pb.RemoveContainerRequest, context: Context) -> pb.RemoveContainerResponse:
        def do() -> pb.RemoveContainerResponse:
            c = self.containers.get(request.container_id)
            if c is not None:
                self._remove_container(c)
            return pb.RemoveContainerResponse()
        return await self._run("RemoveContainer", context, do)

    async def ListContainers(self, request: pb.ListContainersRequest, context: Context) -> pb.ListContainersResponse:
        def build() -> pb.ListContainersResponse:
            f = request.filter if request.HasField("filter") else None
            if f is not None and f.id:
                c0 = self.containers.get(f.id)
                cands = [c0] if c0 is not None else []
            elif f is not None and f.pod_sandbox_id:
                sb = self.sandboxes.get(f.pod_sandbox_id)
                cands = [self.containers[i] for i in sb.containers] if sb is not None else []
            elif f is not None and f.label_selector.get(POD_UID_LABEL):
                ids = self._containers_by_uid.get(f.label_selector[POD_UID_LABEL], {})
                cands = [self.containers[i] for i in ids]
            else:
                cands = list(self.containers.values())
            out = []
            for c in cands:
                if f is not None:
                    if f.pod_sandbox_id and c.sandbox_id != f.pod_sandbox_id:
                        continue
                    if f.HasField("state") and c.state != f.state.state:
                        continue
                    if f.label_selector and not self._labels_match(c.config.labels, f.label_selector):
                        continue
                out.append(c.to_pb())
            return pb.ListContainersResponse(containers=out)
        return await self._run("ListContainers", context, self._cached_list, "ListContainers", request, build)

    async def ContainerStatus(self, request: pb.ContainerStatusRequest, context: Context) -> pb.ContainerStatusResponse:
        def do() -> pb.ContainerStatusResponse:
            c = self._container(request.container_id)
            resp = pb.ContainerStatusResponse(status=c.status_pb())
            if request.verbose:
                resp.info["info"] = '{"runtime":"fakecri"}'
            return resp
        return await self._run("ContainerStatus", context, do)

    async def UpdateContainerResources(
        self, request: pb.UpdateContainerResourcesRequest, context: Context
    ) -> pb.UpdateContainerResourcesResponse:
        def do() -> pb.UpdateContainerResourcesResponse:
            c = self._container(request.container_id)
            if c.state not in (pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING):
                raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                             f"container {c.id} is in {pb.ContainerState.Name(c.state)} state")  # type: ignore[arg-type]
            if request.HasField("linux"):
                res = pb.LinuxContainerResources()
                res.CopyFrom(request.linux)
                c.resources = res
            return pb.UpdateContainerResourcesResponse()
        return await self._run("UpdateContainerResources", context, do)

    async def ReopenContainerLog(self, request: pb.ReopenContainerLogRequest, context: Context) -> pb.ReopenContainerLogResponse:
        def do() -> pb.ReopenContainerLogResponse:
            c = self._container(request.container_id)
            if c.state != pb.CONTAINER_RUNNING:
                raise _Abort(grpc.StatusCode.FAILED_PRECONDITION, "container is not running")
            return pb.ReopenContainerLogResponse()
        return await self._run("ReopenContainerLog", context, do)

    async def ExecSync(self, request: pb.ExecSyncRequest, context: Context) -> pb.ExecSyncResponse:
        def do() -> pb.ExecSyncResponse:
            c = self._container(request.container_id)
            if c.state != pb.CONTAINER_RUNNING:
                raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                             f"container {c.id} is not running")
            return pb.ExecSyncResponse(stdout=b"", stderr=b"", exit_code=0)
        return await self._run("ExecSync", context, do)

    async def _no_streaming(self, name: str, context: Context) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"fakecri: {name} is not supported (no streaming server)")

    async def Exec(self, request: pb.ExecRequest, context: Context) -> pb.ExecResponse:
        return await self._no_streaming("Exec", context)  # type: ignore[no-any-return]

    async def Attach(self, request: pb.AttachRequest, context: Context) -> pb.AttachResponse:
        return await self._no_streaming("Attach", context)  # type: ignore[no-any-return]

    async def PortForward(self, request: pb.PortForwardRequest, context: Context) -> pb.PortForwardResponse:
        return await self._no_streaming("PortForward", context)  # type: ignore[no-any-return]

    def _container_stats(self, c: FakeContainer) -> pb.ContainerStats:
        now = self.clock()
        zero = pb.UInt64Value(value=0)
        return pb.ContainerStats(
            attributes=pb.ContainerAttributes(id=c.id, metadata=c.config.metadata,
                                              labels=c.config.labels, annotations=c.config.annotations),
            cpu=pb.CpuUsage(timestamp=now, usage_core_nano_seconds=zero, usage_nano_cores=zero),
            memory=pb.MemoryUsage(timestamp=now, working_set_bytes=zero, usage_bytes=zero,
                                  rss_bytes=zero, available_bytes=zero, page_faults=zero, major_page_faults=zero),
            writable_layer=pb.FilesystemUsage(timestamp=now, fs_id=pb.FilesystemIdentifier(mountpoint="/fakecri"),
                                              used_bytes=zero, inodes_used=zero),
        )

    def _sandbox_stats(self, sb: FakeSandbox) -> pb.PodSandboxStats:
        now = self.clock()
        zero = pb.UInt64Value(value=0)
        st = pb.PodSandboxStats(attributes=pb.PodSandboxAttributes(
            id=sb.id, metadata=sb.config.metadata, labels=sb.config.labels, annotations=sb.config.annotations))
        st.linux.cpu.CopyFrom(pb.CpuUsage(timestamp=now, usage_core_nano_seconds=zero, usage_nano_cores=zero))
        st.linux.memory.CopyFrom(pb.MemoryUsage(timestamp=now, working_set_bytes=zero, usage_bytes=zero,
                                                rss_bytes=zero, available_bytes=zero))
        st.linux.network.timestamp = now
        st.linux.process.timestamp = now
        st.linux.process.process_count.value = 0
        st.linux.containers.extend(
            self._container_stats(self.containers[cid]) for cid in sb.containers
            if self.containers[cid].state == pb.CONTAINER_RUNNING)
        return st

    async def ContainerStats(self, request: pb.ContainerStatsRequest, context: Context) -> pb.ContainerStatsResponse:
        return await self._run("ContainerStats", context, lambda: pb.ContainerStatsResponse(
            stats=self._container_stats(self._container(request.container_id))))

    async def ListContainerStats(self, request: pb.ListContainerStatsRequest, context: Context) -> pb.ListContainerStatsResponse:
        def do() -> pb.ListContainerStatsResponse:
            f = request.filter if request.HasField("filter") else None
            out = []
            for c in self.containers.values():
                if c.state != pb.CONTAINER_RUNNING:  # containerd reports running containers only
                    continue
                if f is not None:
                    if f.id and c.id != f.id:
                        continue
                    if f.pod_sandbox_id and c.sandbox_id != f.pod_sandbox_id:
                        continue
                    if f.label_selector and not self._labels_match(c.config.labels, f.label_selector):
                        continue
                out.append(self._container_stats(c))
            return pb.ListContainerStatsResponse(stats=out)
        return await self._run("ListContainerStats", context, do)

    async def PodSandboxStats(self, request: pb.PodSandboxStatsRequest, context: Context) -> pb.PodSandboxStatsResponse:
        return await self._run("PodSandboxStats", context, lambda: pb.PodSandboxStatsResponse(
            stats=self._sandbox_stats(self._sandbox(request.pod_sandbox_id))))

    async def ListPodSandboxStats(self, request: pb.ListPodSandboxStatsRequest, context: Context) -> pb.ListPodSandboxStatsResponse:
        def do() -> pb.ListPodSandboxStatsResponse:
            f = request.filter if request.HasField("filter") else None
            out = []
            for sb in self.sandboxes.values():
                if sb.state != pb.SANDBOX_READY:
                    continue
                if f is not None:
                    if f.id and sb.id != f.id:
                        continue
                    if f.label_selector and not self._labels_match(sb.config.labels, f.label_selector):
                        continue
                out.append(self._sandbox_stats(sb))
            return pb.ListPodSandboxStatsResponse(stats=out)
        return await self._run("ListPodSandboxStats", context, do)

    async def UpdateRuntimeConfig(self, request: pb.UpdateRuntimeConfigRequest, context: Context) -> pb.UpdateRuntimeConfigResponse:
        return await self._run("UpdateRuntimeConfig", context, pb.UpdateRuntimeConfigResponse)

    async def GetContainerEvents(self, request: pb.GetEventsRequest, context: Context) -> Any:
        self.calls["GetContainerEvents"] = self.calls.get("GetContainerEvents", 0) + 1
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "fakecri: GetContainerEvents is not implemented (like containerd 1.6)")

    # ------------------------------------------------------------------ ImageService

    async def ListImages(self, request: pb.ListImagesRequest, context: Context) -> pb.ListImagesResponse:
        def do() -> pb.ListImagesResponse:
            want = request.filter.image.image if request.HasField("filter") else ""
            if want:
                img = self._lookup_image(want)
                return pb.ListImagesResponse(images=[img.to_pb()] if img else [])
            return pb.ListImagesResponse(images=[i.to_pb() for i in self.images.values()])
        return await self._run("ListImages", context, do)

    async def ImageStatus(self, request: pb.ImageStatusRequest, context: Context) -> pb.ImageStatusResponse:
        def do() -> pb.ImageStatusResponse:
            img = self._lookup_image(request.image.image)
            if img is None:
                return pb.ImageStatusResponse()  # spec: image unset when not present
            resp = pb.ImageStatusResponse(image=img.to_pb())
            if request.verbose:
                resp.info["info"] = '{"runtime":"fakecri"}'
            return resp
        return await self._run("ImageStatus", context, do)

    async def PullImage(self, request: pb.PullImageRequest, context: Context) -> pb.PullImageResponse:
        def do() -> pb.PullImageResponse:
            ref = request.image.image
            if not ref:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "image reference is empty")
            if "nonexistent" in ref or "invalid" in ref:
                norm = normalize_image(ref)
                # containerd 1.6 reports resolver failures as code Unknown; the message says why
                raise _Abort(grpc.StatusCode.UNKNOWN,
                             f'failed to pull and unpack image "{norm}": failed to resolve reference "{norm}": '
                             f"{norm}: not found")
            img = self._lookup_image(ref) or self.add_image(ref)
            return pb.PullImageResponse(image_ref=img.id)
        return await self._run("PullImage", context, do)

    async def RemoveImage(self, request: pb.RemoveImageRequest, context: Context) -> pb.RemoveImageResponse:
        def do() -> pb.RemoveImageResponse:
            img = self._lookup_image(request.image.image)
            if img is not None:
                self.images.pop(img.id, None)
                for r in (*img.repo_tags, *img.repo_digests, img.id):
                    self._image_refs.pop(r, None)
            return pb.RemoveImageResponse()
        return await self._run("RemoveImage", context, do)

    async def ImageFsInfo(self, request: pb.ImageFsInfoRequest, context: Context) -> pb.ImageFsInfoResponse:
        def do() -> pb.ImageFsInfoResponse:
            now = self.clock()
            used = sum(i.size for i in self.images.values())
            usage = pb.FilesystemUsage(timestamp=now, fs_id=pb.FilesystemIdentifier(mountpoint="/var/lib/fakecri"),
                                       used_bytes=pb.UInt64Value(value=used),
                                       inodes_used=pb.UInt64Value(value=len(self.images)))
            return pb.ImageFsInfoResponse(image_filesystems=[usage], container_filesystems=[usage])
        return await self._run("ImageFsInfo", context, do)
