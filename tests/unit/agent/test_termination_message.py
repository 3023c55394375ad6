"""A container's termination message (terminationMessagePath) shows in its terminated state, read
from the file mounted there once the container has exited, as upstream's toKubeContainerStatus; a
running container's status carries only the runtime's message (its file is not opened)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pykubelet.agent.container.runtime import ContainerState
from pykubelet.agent.images.manager import ImageManager
from pykubelet.agent.kuberuntime.manager import RuntimeManager
from pykubelet.common import labels as names
from pykubelet.cri import pb
from pykubelet.fakecri import FakeRuntime
from pykubelet.fakecri.inprocess import InProcessCRIClient
from tests.fakes import FakeEventRecorder


async def test_the_termination_message_file_is_read_once_the_container_has_exited(tmp_path: Path) -> None:
    client = InProcessCRIClient(FakeRuntime())
    recorder = FakeEventRecorder()
    manager = RuntimeManager(client, images=ImageManager(client, recorder), recorder=recorder,
                             pod_logs_dir=str(tmp_path / "logs"))
    msg = tmp_path / "tm"
    msg.write_text("bye")
    cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p", namespace="default", uid="u1"),
                              labels={names.POD_UID_LABEL: "u1"})
    sid = await client.run_pod_sandbox(cfg)
    ccfg = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name="c"), image=pb.ImageSpec(image="busybox"),
        command=["sh", "-c", "sleep 0.5; exit 3"], log_path="c/0.log",
        mounts=[pb.Mount(container_path="/dev/termination-log", host_path=str(msg))],
        labels={names.POD_UID_LABEL: "u1", names.CONTAINER_NAME_LABEL: "c"},
        annotations={names.TERMINATION_MESSAGE_PATH_ANNOTATION: "/dev/termination-log"})
    await client.start_container(await client.create_container(sid, ccfg, cfg))

    running = (await manager.get_pod_status("u1")).containers[0]
    assert (running.state, running.message) == (ContainerState.RUNNING, "")

    async def exited() -> bool:
        c = (await manager.get_pod_status("u1")).containers[0]
        return c.state == ContainerState.EXITED
    for _ in range(100):
        if await exited():
            break
        await asyncio.sleep(0.05)
    done = (await manager.get_pod_status("u1")).containers[0]
    assert (done.state, done.exit_code, done.message) == (ContainerState.EXITED, 3, "bye")
