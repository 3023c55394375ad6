"""systemd slices over D-Bus for the ``systemd`` cgroup driver (upstream: libcontainer's systemd
cgroup manager, used by ``pkg/kubelet/cm/cgroup_manager_linux.go`` when ``cgroupDriver: systemd``).

With the systemd driver, systemd owns the cgroup tree: a cgroup made behind its back may be moved
or removed, so every slice (``kubepods.slice``, ``kubepods-burstable.slice``,
``kubepods-burstable-pod<uid>.slice``) is created as a transient unit with
``StartTransientUnit(name, "replace", properties, [])`` and removed with ``StopUnit`` on
``org.freedesktop.systemd1.Manager`` (system bus); the resource files are then written directly, as
libcontainer does for the settings it cannot express as unit properties.

Library: ``jeepney`` — a small, pure-Python D-Bus protocol implementation with no dependencies and a
blocking API (the cgroup work already runs in a worker thread), maintained as the D-Bus layer of
``secretstorage``/``keyring``. ``dbus-fast`` is faster but Cython-built and asyncio-only, which buys
nothing for a handful of calls per pod start. ``SystemdUnits`` (``podcgroups``) is the seam; unit tests
use a fake.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

UNIT_EXISTS = "org.freedesktop.systemd1.UnitExists"
NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"


class SystemdDbusUnits:
    """``SystemdUnits`` over the system bus (one connection, opened on first use)."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._lock = threading.Lock()

    def _call(self, method: str, signature: str, body: tuple[Any, ...]) -> None:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        from jeepney.wrappers import unwrap_msg

        manager = DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1",
                              interface="org.freedesktop.systemd1.Manager")
        with self._lock:
            if self._conn is None:
                self._conn = open_dbus_connection(bus="SYSTEM")
            reply = self._conn.send_and_get_reply(new_method_call(manager, method, signature, body), timeout=30)
        unwrap_msg(reply)

    def ensure_slice(self, name: str) -> None:
        from jeepney.wrappers import DBusErrorResponse

        props = [("Description", ("s", f"pykubelet slice {name}")), ("DefaultDependencies", ("b", False))]
        try:
            self._call("StartTransientUnit", "ssa(sv)a(sa(sv))", (name, "replace", props, []))
        except DBusErrorResponse as e:
            if e.name != UNIT_EXISTS:
                raise

    def remove_slice(self, name: str) -> None:
        from jeepney.wrappers import DBusErrorResponse

        try:
            self._call("StopUnit", "ss", (name, "replace"))
        except DBusErrorResponse as e:
            if e.name != NO_SUCH_UNIT:
                log.warning("systemd: stopping %s: %s", name, e)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
