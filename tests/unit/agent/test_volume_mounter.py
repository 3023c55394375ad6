"""The mount table is read like the kernel writes it; test modes never mount."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.volumemanager.mounter import (
    MountPoint,
    SystemMounter,
    TmpfsMode,
    mounts_under,
    parse_mountinfo,
)

MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/my\\040secret rw shared:20 - tmpfs tmpfs rw,size=1024k
41 22 0:36 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/m rw - tmpfs tmpfs rw
42 41 0:37 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/m/inner rw - tmpfs tmpfs rw
"""


def test_mountinfo_paths_are_unescaped_and_types_read() -> None:
    points = parse_mountinfo(MOUNTINFO)
    assert points[1] == MountPoint("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/my secret", "tmpfs",
                                   "tmpfs", "rw,size=1024k")
    assert points[0].fstype == "ext4"


def test_mounts_below_a_directory_come_deepest_first() -> None:
    below = mounts_under(parse_mountinfo(MOUNTINFO), "/var/lib/kubelet/pods/u1")
    assert [m.path.rsplit("/", 1)[1] for m in below] == ["inner", "my secret", "m"]
    assert mounts_under(parse_mountinfo(MOUNTINFO), "/var/lib/kubelet/pods/u") == []


def test_plain_directory_mode_never_mounts_but_tracks_the_stand_in(tmp_path: Path) -> None:
    m = SystemMounter(TmpfsMode.PLAIN_DIRS, mountinfo=str(tmp_path / "none"))
    target = tmp_path / "vol"
    target.mkdir()
    m.mount_tmpfs(str(target), 1024)
    assert m.is_mount_point(str(target))
    assert [p.path for p in m.mount_points()] == [str(target)]
    m.unmount(str(target))
    assert not m.is_mount_point(str(target)) and m.mount_points() == []


def test_the_mounts_below_one_pod_are_read_from_its_lines_of_the_table(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO + "43 22 0:38 / /var/lib/kubelet/pods/u2/volumes/kubernetes.io~projected/t rw - tmpfs "
                    "tmpfs rw\n44 22 0:39 / /srv/pods\\040x/p rw - tmpfs tmpfs rw\n")
    m = SystemMounter(TmpfsMode.MOUNT, mountinfo=str(info))
    for base in ("/var/lib/kubelet/pods/u1", "/var/lib/kubelet/pods/u2", "/var/lib/kubelet/pods",
                 "/var/lib/kubelet/pods/u", "/srv/pods x", "/srv/pods", "/"):
        assert m.mount_points_under(base) == mounts_under(m.mount_points(), base)
    assert [p.path for p in m.mount_points_under("/srv/pods x")] == ["/srv/pods x/p"]
    assert m.mount_points_under("/var/lib/kubelet/pods/u3") == []


def test_plain_directory_stand_ins_are_below_their_pod(tmp_path: Path) -> None:
    m = SystemMounter(TmpfsMode.PLAIN_DIRS, mountinfo=str(tmp_path / "none"))
    target = tmp_path / "pod" / "vol"
    target.mkdir(parents=True)
    m.mount_tmpfs(str(target), None)
    assert [p.path for p in m.mount_points_under(str(tmp_path / "pod"))] == [str(target)]
    assert m.mount_points_under(str(tmp_path / "other")) == []
