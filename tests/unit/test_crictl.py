"""`pykubelet crictl`: crictl's columns, filters and prune on the fake CRI runtime; its formatting rules."""

from __future__ import annotations

import json

import pytest

from pykubelet.cri import pb
from pykubelet.crictl import format as fmt
from pykubelet.crictl.main import Crictl, build_parser
from pykubelet.fakecri import FakeRuntime
from pykubelet.fakecri.inprocess import InProcessCRIClient


class Tool:
    def __init__(self) -> None:
        self.fake = FakeRuntime()
        self.client = InProcessCRIClient(self.fake)
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.crictl = Crictl(self.client, out=self.lines.append, err=self.errors.append)

    async def run(self, *argv: str) -> int:
        args = build_parser().parse_args(list(argv))
        self.lines.clear()
        method = {"ps": self.crictl.ps, "pods": self.crictl.pods, "images": self.crictl.images,
                  "rmi": self.crictl.rmi}[args.cmd]
        return await method(args)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    async def pod(self, name: str, *containers: tuple[str, bool]) -> tuple[str, list[str]]:
        cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name=name, namespace="default", uid="u-" + name))
        sid = await self.client.run_pod_sandbox(cfg)
        ids = []
        for cname, running in containers:
            cid = await self.client.create_container(
                sid, pb.ContainerConfig(metadata=pb.ContainerMetadata(name=cname), image=pb.ImageSpec(image="busybox"),
                                        command=["sleep", "1"]), cfg)
            await self.client.start_container(cid)
            if not running:
                await self.client.stop_container(cid, 0)
            ids.append(cid)
        return sid, ids


async def test_ps_lists_running_containers_with_crictls_columns_and_all_of_them_with_a() -> None:
    tool = Tool()
    sid, (web, done) = await tool.pod("web", ("nginx", True), ("init", False))
    assert await tool.run("ps") == 0
    header, *rows = tool.lines[0].splitlines()
    assert header.split() == ["CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD", "ID", "POD"]
    assert len(rows) == 1 and rows[0].split()[0] == web[:13]
    assert "Running" in rows[0] and "nginx" in rows[0] and sid[:13] in rows[0] and rows[0].endswith("web")
    await tool.run("ps", "-a", "-q")
    assert set(tool.lines) == {web, done}
    await tool.run("ps", "-a", "--state", "exited", "-o", "json")
    assert [c["id"] for c in json.loads(tool.text)["containers"]] == [done]


async def test_pods_and_images_show_crictls_columns() -> None:
    tool = Tool()
    await tool.pod("web")
    await tool.run("pods", "--namespace", "default")
    header, row = tool.text.splitlines()
    assert header.split() == ["POD", "ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT", "RUNTIME"]
    assert "Ready" in row and "web" in row and "(default)" in row
    await tool.run("images")
    header, *rows = tool.text.splitlines()
    assert header.split() == ["IMAGE", "TAG", "IMAGE", "ID", "SIZE"]
    assert any(r.split()[:2] == ["docker.io/library/busybox", "latest"] for r in rows)


async def test_rmi_prune_removes_only_images_no_container_uses() -> None:
    tool = Tool()
    tool.fake.add_image("docker.io/library/spare:1", size=5)
    await tool.pod("web", ("app", False))  # a dead container still uses busybox
    assert await tool.run("rmi", "--prune") == 0
    assert "Deleted: docker.io/library/spare:1" in tool.lines
    left = {t for i in tool.fake.images.values() for t in i.repo_tags}
    assert "docker.io/library/busybox:latest" in left and "docker.io/library/spare:1" not in left
    assert await tool.run("rmi", "nope:1") == 1
    assert tool.errors == ['no such image "nope:1" present']


@pytest.mark.parametrize(("seconds", "text"), [
    (0.5, "Less than a second"), (1, "1 second"), (59, "59 seconds"), (61, "About a minute"),
    (600, "10 minutes"), (3600, "About an hour"), (5 * 3600, "5 hours"), (3 * 86400, "3 days"),
])
def test_durations_read_like_crictls(seconds: float, text: str) -> None:
    assert fmt.human_duration(seconds) == text


def test_sizes_ids_and_tables_read_like_crictls() -> None:
    assert fmt.human_size(1_240_000, 3) == "1.24MB"
    assert fmt.human_size(4_399_000) == "4.399MB"
    assert fmt.human_size(999) == "999B"
    assert fmt.truncate_id("sha256:0123456789abcdef", "sha256:") == "0123456789abc"
    assert fmt.table(["A", "BB"], [["xxxx", "y"]]) == "A      BB\nxxxx   y"
    assert fmt.split_image("docker.io/library/busybox:1.36") == ("docker.io/library/busybox", "1.36")
    assert fmt.split_image("127.0.0.1:5000/x") == ("127.0.0.1:5000/x", "<none>")


async def test_logs_previous_reads_the_instance_before_and_says_when_there_is_none(tmp_path: object) -> None:
    import argparse
    from pathlib import Path

    tool = Tool()
    log_dir = Path(str(tmp_path))
    cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p", namespace="d", uid="u"),
                              log_directory=str(log_dir))
    sid = await tool.client.run_pod_sandbox(cfg)
    ids = []
    for attempt in (0, 1):
        cid = await tool.client.create_container(sid, pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="app", attempt=attempt), image=pb.ImageSpec(image="busybox"),
            command=["true"], log_path=f"app/{attempt}.log"), cfg)
        ids.append(cid)
    (log_dir / "app").mkdir(exist_ok=True)
    (log_dir / "app" / "0.log").write_text("2024-01-01T00:00:00.000000000Z stdout F first-run\n")
    printed: list[str] = []
    tool.crictl._emit_log = lambda line, ts: printed.append(line.split(" ", 3)[3])  # type: ignore[method-assign]
    args = build_parser().parse_args(["logs", "-p", ids[1]])
    assert await tool.crictl.logs(args) == 0
    assert printed == ["first-run"]
    with pytest.raises(ValueError, match="has no previous instance"):
        await tool.crictl.logs(argparse.Namespace(**{**vars(args), "id": ids[0]}))
