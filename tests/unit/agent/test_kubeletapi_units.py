"""Unit tests for the kubelet API's pure parts: CRI log parsing, auth mapping, SPDY and channel framing."""

from __future__ import annotations

import asyncio
import struct

import pytest

from pykubelet.agent.server import auth, logs
from pykubelet.common import spdy, wsstream


def _l(ts: str, stream: str, tag: str, msg: str) -> bytes:
    return f"{ts} {stream} {tag} {msg}\n".encode()


def test_parse_cri_line_full_and_partial() -> None:
    e = logs.parse_cri_line(b"2026-11-29T19:30:39.6708834Z stdout F hi there")
    assert e is not None and e.stream == "stdout" and not e.partial and e.content == b"hi there"
    p = logs.parse_cri_line(b"2026-11-29T19:30:39Z stderr P part")
    assert p is not None and p.partial and p.stream == "stderr"
    assert logs.parse_cri_line(b"garbage") is None
    assert logs.parse_cri_line(b"notatime stdout F x") is None
    empty = logs.parse_cri_line(b"2026-11-29T19:30:39Z stdout F")
    assert empty is not None and empty.content == b""


def test_rfc3339_nano_roundtrip() -> None:
    ns = logs.parse_rfc3339_nano("2026-11-29T19:30:39.6708834Z")
    assert ns % 1_000_000_000 == 670883400
    assert logs.format_rfc3339_nano(ns) == "2026-11-29T19:30:39.6708834Z"
    assert logs.parse_rfc3339_nano("2026-11-29T20:30:39+01:00") == logs.parse_rfc3339_nano("2026-11-29T19:30:39Z")
    with pytest.raises(ValueError):
        logs.parse_rfc3339_nano("yesterday")


DATA = b"".join([
    _l("2026-01-01T00:00:01Z", "stdout", "F", "one"),
    _l("2026-01-01T00:00:02Z", "stdout", "P", "tw"),
    _l("2026-01-01T00:00:02.5Z", "stderr", "F", "err"),
    _l("2026-01-01T00:00:03Z", "stdout", "F", "o"),
    _l("2026-01-01T00:00:04Z", "stdout", "F", "three"),
])


def test_select_joins_partials_and_tails() -> None:
    out, rest = logs.select_lines(DATA, logs.LogOptions())
    assert [e.content for e in out] == [b"one", b"err", b"two", b"three"]
    assert rest == b""
    out, _ = logs.select_lines(DATA, logs.LogOptions(tail_lines=2))
    assert [e.content for e in out] == [b"two", b"three"]
    out, _ = logs.select_lines(DATA, logs.LogOptions(tail_lines=0))
    assert out == []


def test_select_since_and_stream() -> None:
    since = logs.parse_rfc3339_nano("2026-01-01T00:00:02.1Z")
    out, _ = logs.select_lines(DATA, logs.LogOptions(since_ns=since))
    assert [e.content for e in out] == [b"err", b"three"]  # the partial began before since
    out, _ = logs.select_lines(DATA, logs.LogOptions(stream="stderr"))
    assert [e.content for e in out] == [b"err"]


def test_render_timestamps() -> None:
    out, _ = logs.select_lines(DATA, logs.LogOptions(tail_lines=1))
    assert logs.render(out[0], True) == b"2026-01-01T00:00:04Z three\n"
    assert logs.render(out[0], False) == b"three\n"


def test_options_from_query_validation() -> None:
    now = 10**18
    o = logs.options_from_query({"follow": "true", "tailLines": "5", "sinceSeconds": "10", "timestamps": "1"}, now)
    assert o.follow and o.tail_lines == 5 and o.since_ns == now - 10 * 10**9 and o.timestamps
    for bad in ({"tailLines": "x"}, {"tailLines": "-1"}, {"limitBytes": "0"}, {"sinceSeconds": "0"},
                {"sinceTime": "nope"}, {"follow": "maybe"}, {"sinceSeconds": "1", "sinceTime": "2026-01-01T00:00:00Z"}):
        with pytest.raises(ValueError):
            logs.options_from_query(bad, now)


async def test_read_logs_limit_bytes(tmp_path) -> None:
    p = tmp_path / "0.log"
    p.write_bytes(DATA)
    chunks = [c async for c in logs.read_logs(str(p), logs.LogOptions(limit_bytes=6))]
    assert b"".join(chunks) == b"one\ner"


def _append(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


async def test_read_logs_follow_rotation_and_exit(tmp_path) -> None:
    p = tmp_path / "0.log"
    p.write_bytes(_l("2026-01-01T00:00:01Z", "stdout", "F", "before"))
    running = True
    q: asyncio.Queue[bytes] = asyncio.Queue()

    async def is_running() -> bool:
        return running

    async def consume() -> None:
        async for c in logs.read_logs(str(p), logs.LogOptions(follow=True), is_running=is_running,
                                      poll_interval=0.01, running_check_interval=0.01):
            q.put_nowait(c)

    task = asyncio.create_task(consume())
    assert await asyncio.wait_for(q.get(), 10) == b"before\n"
    _append(p, _l("2026-01-01T00:00:02Z", "stdout", "P", "appe"))
    _append(p, _l("2026-01-01T00:00:02Z", "stdout", "F", "nded"))
    assert await asyncio.wait_for(q.get(), 10) == b"appended\n"
    # rotation: rename and create a fresh file (what the kubelet's log manager + runtime reopen do)
    p.rename(tmp_path / "0.log.20260101")
    p.write_bytes(_l("2026-01-01T00:00:03Z", "stdout", "F", "rotated"))
    assert await asyncio.wait_for(q.get(), 10) == b"rotated\n"
    running = False
    await asyncio.wait_for(task, 10)
    assert q.empty()


async def test_read_logs_stops_when_client_gone(tmp_path) -> None:
    p = tmp_path / "0.log"
    p.write_bytes(b"")
    gone = False

    async def consume() -> list[bytes]:
        return [c async for c in logs.read_logs(str(p), logs.LogOptions(follow=True), client_gone=lambda: gone,
                                                poll_interval=0.01)]

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    gone = True
    assert await asyncio.wait_for(task, 10) == []


@pytest.mark.parametrize(("path", "sub"), [
    ("/stats/summary", "stats"), ("/stats", "stats"), ("/statsX", "proxy"), ("/metrics", "metrics"),
    ("/metrics/cadvisor", "metrics"), ("/logs/", "log"), ("/logs/syslog", "log"), ("/spec/", "spec"),
    ("/pods", "proxy"), ("/exec/a/b/c", "proxy"), ("/containerLogs/a/b/c", "proxy"), ("/healthz", "proxy"),
])
def test_subresource_mapping(path: str, sub: str) -> None:
    assert auth.subresource_for_path(path) == sub


def test_verbs_and_sar_body() -> None:
    assert auth.verb_for_method("GET") == "get"
    assert auth.verb_for_method("POST") == "create"
    attrs = auth.request_attributes(auth.UserInfo("bob", groups=("g",)), "GET", "/metrics", "n1")
    body = auth.subject_access_review(attrs)
    assert body["spec"]["resourceAttributes"] == {"verb": "get", "group": "", "version": "v1", "resource": "nodes",
                                                   "subresource": "metrics", "name": "n1"}
    assert body["spec"]["user"] == "bob" and body["spec"]["groups"] == ["g"]
    assert attrs.forbidden_message() == "Forbidden (user=bob, verb=get, resource=nodes, subresource=metrics)"


def test_user_from_cert() -> None:
    cert = {"subject": ((("organizationName", "system:masters"),), (("commonName", "kube-apiserver-kubelet-client"),))}
    u = auth.user_from_cert(cert)
    assert u is not None and u.name == "kube-apiserver-kubelet-client" and u.groups == ("system:masters",)
    assert auth.user_from_cert(None) is None


def test_spdy_headers_roundtrip_shared_context() -> None:
    c, d = spdy.HeaderCompressor(), spdy.HeaderDecompressor()
    for i in range(3):
        h = {"streamtype": ["data"], "port": [str(80 + i)], "requestid": ["0", "1"]}
        assert d.decompress(c.compress(h)) == h


def test_spdy_frame_parser_incremental() -> None:
    frames = spdy.encode_data(3, b"hello", spdy.FLAG_FIN) + spdy.encode_control(spdy.PING, 0, struct.pack(">I", 7))
    p = spdy.FrameParser()
    got: list[spdy.Frame] = []
    for b in frames:
        got += p.feed(bytes([b]))
    assert got == [spdy.DataFrame(3, spdy.FLAG_FIN, b"hello"), spdy.ControlFrame(spdy.PING, 0, struct.pack(">I", 7))]
    with pytest.raises(spdy.SpdyError):
        spdy.FrameParser().feed(struct.pack(">HHI", 0x8002, 1, 0))  # SPDY/2 refused


async def _pipe_pair() -> tuple[spdy.SpdySession, spdy.SpdySession]:
    a2b: asyncio.Queue[bytes] = asyncio.Queue()
    b2a: asyncio.Queue[bytes] = asyncio.Queue()

    async def wa(d: bytes) -> None:
        a2b.put_nowait(d)

    async def wb(d: bytes) -> None:
        b2a.put_nowait(d)

    client = spdy.SpdySession(b2a.get, wa, client=True)
    server = spdy.SpdySession(a2b.get, wb, client=False)
    return client, server


async def test_spdy_session_streams_and_half_close() -> None:
    client, server = await _pipe_pair()
    tasks = [asyncio.create_task(client.run()), asyncio.create_task(server.run())]

    async def serve() -> None:
        s = await server.accept()
        assert s is not None and spdy.header(s.headers, "streamType") == "stdin"
        await s.reply()
        data = b""
        while chunk := await s.read():
            data += chunk
        await s.write(data.upper())
        await s.close()

    st = asyncio.create_task(serve())
    stream = await client.open_stream({"streamtype": ["stdin"]})
    await stream.write(b"abc" * 20000)
    await stream.close()
    got = b""
    while chunk := await stream.read():
        got += chunk
    assert got == b"ABC" * 20000
    await st
    await client.close()
    await server.close()
    for t in tasks:
        t.cancel()


def test_channel_framing_and_status() -> None:
    assert wsstream.encode(1, b"x") == b"\x01x"
    assert wsstream.decode(b"\x03{}") == (3, b"{}")
    with pytest.raises(ValueError):
        wsstream.decode(b"")
    st = wsstream.status_exit_code(3)
    assert wsstream.exit_code_of(st) == 3
    assert wsstream.exit_code_of(wsstream.status_success()) == 0


def _crashlooping_status() -> dict[str, object]:
    return {"containerStatuses": [{
        "name": "app", "containerID": "containerd://c2", "restartCount": 2,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://c2"}},
    }]}


def test_logs_of_a_crashlooping_container_come_from_the_instance_that_just_crashed() -> None:
    from pykubelet.agent.server.cri_helpers import logs_container_id

    status = _crashlooping_status()
    assert logs_container_id(status, "app", previous=True) == "c2"  # not c1, the one before it
    assert logs_container_id(status, "app", previous=False) == "c2"
    running = {"containerStatuses": [{"name": "app", "containerID": "containerd://c3",
                                      "state": {"running": {}},
                                      "lastState": {"terminated": {"containerID": "containerd://c2"}}}]}
    assert logs_container_id(running, "app", previous=False) == "c3"
    assert logs_container_id(running, "app", previous=True) == "c2"
    assert logs_container_id({"containerStatuses": [{"name": "app", "state": {"running": {}}}]}, "app",
                             previous=True) is None  # unknown: the runtime's order decides
    assert logs_container_id({}, "app", previous=True) is None
