"""Paged lists over HTTP, as upstream's: every page is the state at the first page's revision, and a
continue token older than the server's history is 410 Expired with a token for the rest."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from pykubelet.server.main import run_server
from tests.builders import pod

from .conftest import Http, Kubectl

PODS = "/api/v1/namespaces/default/pods"
EXPIRED = ("The provided continue parameter is too old to display a consistent list result. You can start a new "
           "list without the continue parameter, or use the continue token in this response to retrieve the "
           "remainder of the results. Continuing with the provided token results in an inconsistent list - "
           "objects that were created, modified, or deleted between the time the first chunk was returned and "
           "now may show up in the list.")


async def _create(h: Http, *names: str) -> None:
    for name in names:
        st, body = await h.req("POST", PODS, pod(name, uid=""))
        assert st == 201, body


async def _page(h: Http, limit: int, cont: str = "") -> dict[str, Any]:
    params = {"limit": str(limit), **({"continue": cont} if cont else {})}
    st, page = await h.req("GET", PODS, params=params)
    assert st == 200, page
    return dict(page)


def _names(page: dict[str, Any]) -> list[str]:
    return [p["metadata"]["name"] for p in page["items"]]


async def test_pages_after_the_first_show_the_state_of_the_first_page(tmp_path: Path) -> None:
    async with run_server(tmp_path / "d", port=0, controllers=False) as srv:
        h = Http(srv)
        try:
            await _create(h, *(f"p{i}" for i in range(10)))
            _st, full = await h.req("GET", PODS)
            first = await _page(h, 3)
            rev = first["metadata"]["resourceVersion"]
            assert _names(first) == ["p0", "p1", "p2"] and first["metadata"]["remainingItemCount"] == 7
            # between the pages: a pod created where a later page lists, one deleted, one changed
            await _create(h, "p55")
            assert (await h.req("DELETE", f"{PODS}/p7", {"gracePeriodSeconds": 0}))[0] == 200
            st, _ = await h.req("PATCH", f"{PODS}/p8", {"metadata": {"labels": {"changed": "yes"}}},
                                content_type="application/merge-patch+json")
            assert st == 200
            pages, cont = [first], first["metadata"]["continue"]
            while cont:
                pages.append(await _page(h, 3, cont))
                cont = pages[-1]["metadata"].get("continue", "")
            assert [p["metadata"]["resourceVersion"] for p in pages] == [rev] * 4
            assert [p["metadata"].get("remainingItemCount") for p in pages] == [7, 4, 1, None]
            assert [item for p in pages for item in p["items"]] == full["items"]  # the same objects, byte for byte
            # a new list sees the writes
            _st, now = await h.req("GET", PODS)
            assert "p55" in _names(now) and "p7" not in _names(now)
            assert int(now["metadata"]["resourceVersion"]) > int(rev)
        finally:
            await h.close()


async def test_a_continue_token_older_than_the_history_is_gone_with_a_token_for_the_rest(tmp_path: Path) -> None:
    async with run_server(tmp_path / "d", port=0, controllers=False, history=50) as srv:
        h = Http(srv)
        try:
            await _create(h, "a1", "a2", "a3", "a4")
            first = await _page(h, 2)
            for i in range(60):  # more writes than the history holds
                st, _ = await h.req("POST", "/api/v1/namespaces/default/configmaps",
                                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}"}})
                assert st == 201
            await _create(h, "a0", "a5")
            st, status = await h.req("GET", PODS, params={"limit": "2", "continue": first["metadata"]["continue"]})
            assert st == 410
            assert {k: status[k] for k in ("kind", "status", "reason", "code", "message")} == {
                "kind": "Status", "status": "Failure", "reason": "Expired", "code": 410, "message": EXPIRED}
            # the token in the Status continues at the current state, after the same key
            rest = await _page(h, 2, status["metadata"]["continue"])
            assert _names(rest) == ["a3", "a4"]
            last = await _page(h, 2, rest["metadata"]["continue"])
            assert _names(last) == ["a5"] and "continue" not in last["metadata"]
            assert rest["metadata"]["resourceVersion"] == last["metadata"]["resourceVersion"]
            assert int(rest["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
        finally:
            await h.close()


async def test_a_list_with_an_exact_resource_version_shows_the_state_at_that_revision(tmp_path: Path) -> None:
    async with run_server(tmp_path / "d", port=0, controllers=False, history=50) as srv:
        h = Http(srv)
        try:
            await _create(h, "e1", "e2")
            _st, then = await h.req("GET", PODS)
            rev = then["metadata"]["resourceVersion"]
            await _create(h, "e3")
            assert (await h.req("DELETE", f"{PODS}/e1", {"gracePeriodSeconds": 0}))[0] == 200
            st, at = await h.req("GET", PODS, params={"resourceVersion": rev, "resourceVersionMatch": "Exact"})
            assert st == 200, at
            assert _names(at) == ["e1", "e2"] and at["metadata"]["resourceVersion"] == rev
            st, now = await h.req("GET", PODS, params={"resourceVersion": rev, "resourceVersionMatch": "NotOlderThan"})
            assert st == 200 and _names(now) == ["e2", "e3"]
            st, ahead = await h.req("GET", PODS, params={"resourceVersion": str(int(rev) + 1000),
                                                         "resourceVersionMatch": "Exact"})
            assert st == 504 and ahead["message"].startswith("Too large resource version")
            await _create(h, *(f"x{i}" for i in range(60)))  # more writes than the history holds
            st, gone = await h.req("GET", PODS, params={"resourceVersion": rev, "resourceVersionMatch": "Exact"})
            assert st == 410 and gone["reason"] == "Expired"
            assert gone["message"] == "The resourceVersion for the provided list is too old."
        finally:
            await h.close()


async def test_a_continue_token_that_does_not_decode_is_a_bad_request(tmp_path: Path) -> None:
    async with run_server(tmp_path / "d", port=0, controllers=False) as srv:
        h = Http(srv)
        try:
            def token(d: dict[str, Any]) -> str:
                return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
            for tok, why in ((token({"v": "meta.k8s.io/v1", "rv": 0, "start": "p\x00"}),
                              "incorrect encoded start resourceVersion (version meta.k8s.io/v1)"),
                             (token({"v": "meta.k8s.io/v1", "rv": 3, "start": ""}),
                              "encoded start key empty (version meta.k8s.io/v1)"),
                             (token({"v": "v9", "rv": 3, "start": "p"}),
                              'server does not recognize this encoded version "v9"'),
                             (token({"v": "meta.k8s.io/v1", "rv": 3, "start": "../kube-system/x"}),
                              "../kube-system/x")):
                st, body = await h.req("GET", PODS, params={"limit": "1", "continue": tok})
                assert (st, body["reason"], body["message"]) == (
                    400, "BadRequest", f"invalid continue token: continue key is not valid: {why}")
        finally:
            await h.close()


async def test_kubectl_lists_in_chunks(kubectl: Kubectl, http: Http) -> None:
    await _create(http, *(f"k{i}" for i in range(7)))
    out = await kubectl.ok("get", "pods", "--chunk-size=3", "-o", "name")
    assert out.split() == [f"pod/k{i}" for i in range(7)]
    table = (await kubectl.ok("get", "pods", "--chunk-size=3")).splitlines()
    assert table[0].split()[:3] == ["NAME", "READY", "STATUS"]
    assert [line.split()[0] for line in table[1:]] == [f"k{i}" for i in range(7)]
