"""`pykubelet crictl`: the node troubleshooting tool (cri-tools' ``crictl``) over the agent's CRI client.

Debian ships no crictl, yet every node troubleshooting guide starts with ``crictl ps``, ``crictl
logs`` and ``crictl rmi --prune``. This is the common part of it, with crictl's flags and columns:

``ps`` (``-a``, ``-q``, ``--name``, ``--pod``, ``--state``, ``--label``, ``--image``, ``-l``, ``-n``,
``--no-trunc``, ``-o json|yaml|table``), ``pods`` (``--name``, ``--namespace``, ``--state``,
``--label``, ``-q``, ``-l``, ``-n``, ``--no-trunc``, ``-o``), ``images`` (``-q``, ``--digests``,
``--no-trunc``, ``-o``), ``inspect``/``inspectp`` (verbose status as JSON), ``logs`` (``-f``,
``--tail``, ``--timestamps``, ``-p``: read from the CRI log file like crictl does), ``exec`` (ExecSync, or
a terminal session with ``-it`` over the runtime's streaming server, see :mod:`.stream`), ``stats`` (CPU % from two samples a second apart when the
runtime gives no nano-core rate) and ``rmi`` (``--prune``: every image no container uses, except
pinned ones and the runtime's sandbox image; ``-a``).

The endpoint is ``--runtime-endpoint``/``-r``, else ``CONTAINER_RUNTIME_ENDPOINT``, else the private
containerd of ``pykubelet up`` in ``--data-dir`` (default ``./.pykubelet``), else the agent's own
default (``unix:///run/containerd/containerd.sock``). ``--image-endpoint``/``-i`` works as crictl's.
Only ``pykubelet.common`` and ``pykubelet.cri`` are imported (a peer of agent and server).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format

from pykubelet.cri import CRIClient, CRIError, pb
from pykubelet.cri.client import DEFAULT_ENDPOINT
from pykubelet.crictl import format as fmt

Out = Callable[[str], None]


def _print(text: str) -> None:
    print(text, flush=True)


def default_endpoint(data_dir: str) -> str:
    env = os.environ.get("CONTAINER_RUNTIME_ENDPOINT")
    if env:
        return env
    try:
        state = json.loads((Path(data_dir) / "images.json").read_text())
        if state.get("address"):
            return "unix://" + str(state["address"])
    except (OSError, ValueError):
        pass
    sock = Path(data_dir) / "containerd" / "containerd.sock"
    if sock.exists():
        return "unix://" + str(sock.absolute())
    return DEFAULT_ENDPOINT


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pykubelet crictl", description="crictl over the agent's CRI client")
    p.add_argument("-r", "--runtime-endpoint", default=None)
    p.add_argument("-i", "--image-endpoint", default=None)
    p.add_argument("-t", "--timeout", type=float, default=10.0)
    p.add_argument("--data-dir", default="./.pykubelet", help="a `pykubelet up` data dir to find its containerd")
    sub = p.add_subparsers(dest="cmd", required=True)

    def listing(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-q", "--quiet", action="store_true")
        sp.add_argument("-o", "--output", default="table", choices=["table", "json", "yaml"])
        sp.add_argument("--no-trunc", action="store_true")
        sp.add_argument("-l", "--latest", action="store_true")
        sp.add_argument("-n", "--last", type=int, default=0)
        sp.add_argument("--label", action="append", default=[])
        sp.add_argument("--name", default="")
        sp.add_argument("-s", "--state", default="")

    ps = sub.add_parser("ps", help="list containers")
    listing(ps)
    ps.add_argument("-a", "--all", action="store_true")
    ps.add_argument("-p", "--pod", default="")
    ps.add_argument("--image", default="")
    ps.add_argument("--id", default="")
    pods = sub.add_parser("pods", help="list pod sandboxes")
    listing(pods)
    pods.add_argument("--namespace", default="")
    pods.add_argument("--id", default="")
    imgs = sub.add_parser("images", aliases=["image", "img"], help="list images")
    imgs.add_argument("-q", "--quiet", action="store_true")
    imgs.add_argument("-o", "--output", default="table", choices=["table", "json", "yaml"])
    imgs.add_argument("--no-trunc", action="store_true")
    imgs.add_argument("--digests", action="store_true")
    imgs.add_argument("-v", "--verbose", action="store_true")
    imgs.add_argument("image", nargs="?", default="")
    for name in ("inspect", "inspectp"):
        sp = sub.add_parser(name, help=f"{'container' if name == 'inspect' else 'pod'} status, verbose")
        sp.add_argument("-o", "--output", default="json", choices=["json", "yaml", "go-template", "table"])
        sp.add_argument("ids", nargs="+")
    logs = sub.add_parser("logs", help="a container's logs")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--tail", type=int, default=-1)
    logs.add_argument("--timestamps", "-t", action="store_true")
    logs.add_argument("-p", "--previous", action="store_true")
    logs.add_argument("id")
    ex = sub.add_parser("exec", help="run a command in a container")
    ex.add_argument("-i", "--interactive", action="store_true")
    ex.add_argument("-t", "--tty", action="store_true")
    ex.add_argument("-s", "--sync", action="store_true")
    ex.add_argument("--timeout", dest="exec_timeout", type=int, default=0)
    ex.add_argument("id")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    st = sub.add_parser("stats", help="container resource usage")
    st.add_argument("-a", "--all", action="store_true")
    st.add_argument("-o", "--output", default="table", choices=["table", "json", "yaml"])
    st.add_argument("-p", "--pod", default="")
    st.add_argument("--label", action="append", default=[])
    st.add_argument("--id", default="")
    st.add_argument("ids", nargs="*")
    rmi = sub.add_parser("rmi", help="remove images")
    rmi.add_argument("-a", "--all", action="store_true")
    rmi.add_argument("-q", "--prune", action="store_true")
    rmi.add_argument("images", nargs="*")
    return p


def _labels(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(f"invalid label {item!r}: expected key=value")
        out[k] = v
    return out


def _dump(msg: Any, output: str) -> str:
    data = json_format.MessageToDict(msg, always_print_fields_with_no_presence=True)
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False).rstrip()
    return json.dumps(data, indent=2)


def _newest(items: list[Any], latest: bool, last: int) -> list[Any]:
    items = sorted(items, key=lambda x: x.created_at, reverse=True)
    if latest:
        return items[:1]
    if last > 0:
        return items[:last]
    return items


class Crictl:
    def __init__(self, runtime: CRIClient, images: CRIClient | None = None, out: Out = _print,
                 err: Out | None = None, clock: Callable[[], float] = time.time) -> None:
        self.rt = runtime
        self.img = images or runtime
        self.out = out
        self.err = err or (lambda s: print(s, file=sys.stderr, flush=True))
        self.clock = clock

    async def _resolve_container(self, prefix: str) -> str:
        matches = [c.id for c in await self.rt.list_containers() if c.id.startswith(prefix)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise CRIError(_not_found(), f'container "{prefix}" not found')
        raise CRIError(_not_found(), f'container id "{prefix}" is ambiguous ({len(matches)} containers match)')

    async def _resolve_pod(self, prefix: str) -> str:
        matches = [s.id for s in await self.rt.list_pod_sandbox() if s.id.startswith(prefix)]
        if len(matches) == 1:
            return matches[0]
        raise CRIError(_not_found(), f'pod sandbox "{prefix}" not found' if not matches
                       else f'pod sandbox id "{prefix}" is ambiguous')

    async def ps(self, a: argparse.Namespace) -> int:
        flt = pb.ContainerFilter(label_selector=_labels(a.label))
        if a.pod:
            flt.pod_sandbox_id = await self._resolve_pod(a.pod)
        if a.id:
            flt.id = await self._resolve_container(a.id)
        if a.state:
            flt.state.state = pb.ContainerState.Value("CONTAINER_" + a.state.upper())
        elif not a.all and not a.latest and not a.last:
            flt.state.state = pb.CONTAINER_RUNNING
        containers = [c for c in await self.rt.list_containers(flt)
                      if (not a.name or a.name in c.metadata.name) and (not a.image or a.image in c.image.image)]
        containers = _newest(containers, a.latest, a.last)
        if a.output != "table":
            self.out(_dump(pb.ListContainersResponse(containers=containers), a.output))
            return 0
        if a.quiet:
            for c in containers:
                self.out(c.id)
            return 0
        pods = {s.id: s for s in await self.rt.list_pod_sandbox()}
        rows = []
        for c in containers:
            pod = pods.get(c.pod_sandbox_id)
            image = c.image.image
            if image.startswith("sha256:") and not a.no_trunc:
                image = fmt.truncate_id(image, "sha256:")
            rows.append([c.id if a.no_trunc else fmt.truncate_id(c.id), image,
                         fmt.ago(c.created_at, self.clock()), fmt.container_state(c.state), c.metadata.name,
                         str(c.metadata.attempt),
                         c.pod_sandbox_id if a.no_trunc else fmt.truncate_id(c.pod_sandbox_id),
                         pod.metadata.name if pod else "unknown"])
        self.out(fmt.table(["CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD ID", "POD"], rows))
        return 0

    async def pods(self, a: argparse.Namespace) -> int:
        flt = pb.PodSandboxFilter(label_selector=_labels(a.label))
        if a.id:
            flt.id = await self._resolve_pod(a.id)
        if a.state:
            flt.state.state = pb.PodSandboxState.Value(
                {"ready": "SANDBOX_READY", "notready": "SANDBOX_NOTREADY"}[a.state.lower()])
        items = [s for s in await self.rt.list_pod_sandbox(flt)
                 if (not a.name or a.name in s.metadata.name)
                 and (not a.namespace or a.namespace in s.metadata.namespace)]
        items = _newest(items, a.latest, a.last)
        if a.output != "table":
            self.out(_dump(pb.ListPodSandboxResponse(items=items), a.output))
            return 0
        if a.quiet:
            for s in items:
                self.out(s.id)
            return 0
        rows = [[s.id if a.no_trunc else fmt.truncate_id(s.id), fmt.ago(s.created_at, self.clock()),
                 fmt.sandbox_state(s.state), s.metadata.name, s.metadata.namespace, str(s.metadata.attempt),
                 s.runtime_handler or "(default)"] for s in items]
        self.out(fmt.table(["POD ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT", "RUNTIME"], rows))
        return 0

    async def images(self, a: argparse.Namespace) -> int:
        flt = pb.ImageFilter(image=pb.ImageSpec(image=a.image)) if a.image else None
        imgs = sorted(await self.img.list_images(flt), key=lambda i: (list(i.repo_tags) or [""])[0])
        if a.output != "table":
            self.out(_dump(pb.ListImagesResponse(images=imgs), a.output))
            return 0
        if a.quiet:
            for i in imgs:
                self.out(i.id)
            return 0
        header = ["IMAGE", "TAG", *(["DIGEST"] if a.digests else []), "IMAGE ID", "SIZE"]
        rows = []
        for i in imgs:
            digest = ""
            if i.repo_digests:
                digest = i.repo_digests[0].partition("@")[2]
                digest = digest if a.no_trunc else fmt.truncate_id(digest, "sha256:")
            image_id = i.id if a.no_trunc else fmt.truncate_id(i.id, "sha256:")
            names = [fmt.split_image(t) for t in i.repo_tags] or [
                (fmt.split_image(d)[0], "<none>") for d in i.repo_digests[:1]] or [("<none>", "<none>")]
            for repo, tag in names:
                rows.append([repo, tag, *([digest or "<none>"] if a.digests else []), image_id,
                             fmt.human_size(i.size, 3)])
        self.out(fmt.table(header, rows))
        return 0

    async def inspect(self, a: argparse.Namespace, pod: bool) -> int:
        for id_ in a.ids:
            if pod:
                resp: Any = await self.rt.pod_sandbox_status(await self._resolve_pod(id_), verbose=True)
            else:
                resp = await self.rt.container_status(await self._resolve_container(id_), verbose=True)
            data = json_format.MessageToDict(resp.status, always_print_fields_with_no_presence=True)
            doc: dict[str, Any] = {"status": data}
            for k, v in resp.info.items():
                try:
                    doc["info"] = json.loads(v) if k == "info" else doc.get("info", {}) | {k: json.loads(v)}
                except ValueError:
                    doc.setdefault("info", {})[k] = v
            self.out(yaml.safe_dump(doc, sort_keys=False).rstrip() if a.output == "yaml"
                     else json.dumps(doc, indent=2))
        return 0

    async def logs(self, a: argparse.Namespace) -> int:
        cid = await self._resolve_container(a.id)
        status = (await self.rt.container_status(cid)).status
        if a.previous:  # crictl: the same pod's container of that name with the attempt before
            same = [c for c in await self.rt.list_containers(pb.ContainerFilter(
                pod_sandbox_id=(await self.rt.list_containers(pb.ContainerFilter(id=cid)))[0].pod_sandbox_id))
                if c.metadata.name == status.metadata.name and c.metadata.attempt == status.metadata.attempt - 1]
            if not same:
                raise ValueError(f"container {cid[:13]} has no previous instance (attempt "
                                 f"{status.metadata.attempt - 1} was removed or never ran)")
            cid = same[0].id
            status = (await self.rt.container_status(cid)).status
            a.follow = False
        path = status.log_path
        if not path:
            raise ValueError(f"container {cid[:13]} has no log file")
        lines = await asyncio.to_thread(_read_lines, path)
        if a.tail >= 0:
            lines = lines[-a.tail:] if a.tail else []
        for line in lines:
            self._emit_log(line, a.timestamps)
        if a.follow:
            await self._follow(cid, path, a.timestamps)
        return 0

    def _emit_log(self, line: str, timestamps: bool) -> None:
        ts, stream, tag, text = _parse_cri_line(line)
        if stream is None:
            return
        write = sys.stdout.write if stream == "stdout" else sys.stderr.write
        prefix = f"{ts} " if timestamps else ""
        write(prefix + text + ("\n" if tag == "F" else ""))
        (sys.stdout if stream == "stdout" else sys.stderr).flush()

    async def _follow(self, cid: str, path: str, timestamps: bool) -> None:
        f = await asyncio.to_thread(open, path, encoding="utf-8", errors="replace")
        try:
            f.seek(0, os.SEEK_END)
            ino = os.fstat(f.fileno()).st_ino
            buf = ""
            while True:
                chunk = f.read()
                if chunk:
                    buf += chunk
                    *complete, buf = buf.split("\n")
                    for line in complete:
                        self._emit_log(line, timestamps)
                    continue
                try:
                    if os.stat(path).st_ino != ino:  # rotated: reopen the new file
                        f.close()
                        f = open(path, encoding="utf-8", errors="replace")  # noqa: ASYNC230
                        ino = os.fstat(f.fileno()).st_ino
                        continue
                except FileNotFoundError:
                    pass
                st = (await self.rt.container_status(cid)).status
                if st.state == pb.CONTAINER_EXITED:
                    rest = f.read()
                    for line in (buf + rest).split("\n"):
                        if line:
                            self._emit_log(line, timestamps)
                    return
                await asyncio.sleep(0.2)
        finally:
            f.close()

    async def exec(self, a: argparse.Namespace) -> int:
        cmd = a.command[1:] if a.command[:1] == ["--"] else list(a.command)
        if not cmd:
            raise ValueError("exec: a command is required (crictl exec ID CMD...)")
        if a.interactive != a.tty:
            raise ValueError("exec: -i and -t go together (a terminal session: -it); without a terminal run "
                             "the command without -i/-t")
        if a.tty:
            from pykubelet.crictl.stream import run_terminal

            cid = await self._resolve_container(a.id)
            resp = await self.rt.exec(pb.ExecRequest(container_id=cid, cmd=cmd, tty=True, stdin=True, stdout=True))
            return await run_terminal(resp.url)
        resp = await self.rt.exec_sync(await self._resolve_container(a.id), cmd, a.exec_timeout)
        sys.stdout.buffer.write(resp.stdout)
        sys.stdout.flush()
        sys.stderr.buffer.write(resp.stderr)
        sys.stderr.flush()
        return int(resp.exit_code)

    async def stats(self, a: argparse.Namespace) -> int:
        flt = pb.ContainerStatsFilter(label_selector=_labels(a.label))
        ids = [a.id, *a.ids] if a.id else list(a.ids)
        if len(ids) == 1:
            flt.id = await self._resolve_container(ids[0])
        if a.pod:
            flt.pod_sandbox_id = await self._resolve_pod(a.pod)
        containers = {c.id: c for c in await self.rt.list_containers()}
        first = await self.rt.list_container_stats(flt)
        if not a.all:
            first = [s for s in first if containers.get(s.attributes.id) is not None
                     and containers[s.attributes.id].state == pb.CONTAINER_RUNNING]
        if ids:
            resolved = [await self._resolve_container(i) for i in ids]
            first = [s for s in first if s.attributes.id in resolved]
        if a.output != "table":
            self.out(_dump(pb.ListContainerStatsResponse(stats=first), a.output))
            return 0
        cpu: dict[str, float] = {}
        if any(not s.cpu.HasField("usage_nano_cores") or not s.cpu.usage_nano_cores.value for s in first):
            await asyncio.sleep(1.0)
            second = {s.attributes.id: s for s in await self.rt.list_container_stats(flt)}
            for s in first:
                s2 = second.get(s.attributes.id)
                if s2 is None:
                    continue
                dt = (s2.cpu.timestamp - s.cpu.timestamp) / 1e9
                used = s2.cpu.usage_core_nano_seconds.value - s.cpu.usage_core_nano_seconds.value
                cpu[s.attributes.id] = (used / 1e9) / dt * 100 if dt > 0 else 0.0
        rows = []
        for s in first:
            pct = cpu.get(s.attributes.id, s.cpu.usage_nano_cores.value / 1e7)
            rows.append([fmt.truncate_id(s.attributes.id), s.attributes.metadata.name, f"{pct:.2f}",
                         fmt.human_size(s.memory.working_set_bytes.value), fmt.human_size(s.writable_layer.used_bytes.value),
                         str(s.writable_layer.inodes_used.value)])
        self.out(fmt.table(["CONTAINER", "NAME", "CPU %", "MEM", "DISK", "INODES"], rows))
        return 0

    async def _sandbox_image(self) -> str:
        """containerd names its sandbox (pause) image in verbose Status; pruning it would break new pods."""
        try:
            info = (await self.rt.status(verbose=True)).info.get("config", "")
            return str(json.loads(info).get("sandboxImage") or "") if info else ""
        except (CRIError, ValueError, AttributeError):
            return ""

    async def rmi(self, a: argparse.Namespace) -> int:
        targets: list[str] = list(a.images)
        if a.prune or a.all:
            used = set()
            if a.prune:
                for c in await self.rt.list_containers():
                    used.update({c.image_ref, c.image.image})
                used.add(await self._sandbox_image())
            for i in await self.img.list_images():
                if i.pinned or i.id in used or any(r in used for r in (*i.repo_tags, *i.repo_digests)):
                    continue
                targets.append(i.id)
        if not targets:
            if a.prune or a.all:
                return 0  # nothing unused
            raise ValueError("rmi: no image given (crictl rmi IMAGE..., --prune or --all)")
        rc = 0
        for t in dict.fromkeys(targets):
            st = (await self.img.image_status(t)).image
            if not st.id:
                self.err(f'no such image "{t}" present')
                rc = 1
                continue
            try:
                await self.img.remove_image(st.id)
            except CRIError as e:
                self.err(f'error of removing image "{t}": {e}')
                rc = 1
                continue
            for name in (*st.repo_tags, *st.repo_digests) or (st.id,):
                self.out(f"Deleted: {name}")
        return rc


def _not_found() -> Any:
    from pykubelet.cri import StatusCode

    return StatusCode.NOT_FOUND


def _read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def _parse_cri_line(line: str) -> tuple[str, str | None, str, str]:
    """``<RFC3339Nano> <stream> <P|F> <text>`` -> parts (stream None for a malformed line)."""
    parts = line.split(" ", 3)
    if len(parts) < 3 or parts[1] not in ("stdout", "stderr"):
        return "", None, "", ""
    return parts[0], parts[1], parts[2], parts[3] if len(parts) > 3 else ""


async def run(args: argparse.Namespace, runtime: CRIClient, images: CRIClient | None = None) -> int:
    c = Crictl(runtime, images)
    if args.cmd == "ps":
        return await c.ps(args)
    if args.cmd == "pods":
        return await c.pods(args)
    if args.cmd in ("images", "image", "img"):
        return await c.images(args)
    if args.cmd in ("inspect", "inspectp"):
        return await c.inspect(args, pod=args.cmd == "inspectp")
    if args.cmd == "logs":
        return await c.logs(args)
    if args.cmd == "exec":
        return await c.exec(args)
    if args.cmd == "stats":
        return await c.stats(args)
    return await c.rmi(args)


async def _amain(args: argparse.Namespace) -> int:
    endpoint = args.runtime_endpoint or default_endpoint(args.data_dir)
    runtime = CRIClient(endpoint, timeout=args.timeout)
    images = CRIClient(args.image_endpoint, timeout=args.timeout) if args.image_endpoint else None
    try:
        return await run(args, runtime, images)
    finally:
        await runtime.close()
        if images is not None:
            await images.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(_amain(args))
    except CRIError as e:
        print(f"crictl: {e.details or e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `pykubelet crictl logs ID | head`
        return 0
    except (ValueError, KeyError, OSError) as e:
        print(f"crictl: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
