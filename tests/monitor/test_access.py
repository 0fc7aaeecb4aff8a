"""The dashboard and Monitor.Report beyond loopback: a token is made (or given), required on every
path but /healthz and on Report, never logged; on loopback both stay open as on a laptop."""
from __future__ import annotations

import http.client
import logging
import stat
from concurrent import futures
from urllib.parse import urlparse

import grpc
import pytest

from m1flow.contracts import rpc, rpc_grpc
from svc_monitor.access import COOKIE, TOKEN_FILE
from svc_monitor.client import report
from svc_monitor.config import MonitorConfig
from svc_monitor.dashboard import Dashboard
from svc_monitor.service import MonitorService


def request(url: str, path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    """One GET, redirects not followed (the token-in-URL step is a redirect)."""
    where = urlparse(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    reply = conn.getresponse()
    reply.read()
    conn.close()
    return reply


@pytest.fixture
def exposed(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    service = MonitorService(MonitorConfig(run_dir=tmp_path, dashboard_host="0.0.0.0", dashboard_port=0))
    service.dashboard = Dashboard(service.store, service.config, service.state, service.token)
    url = service.dashboard.start()
    yield service, url
    service.dashboard.close()
    service.store.close()


def test_a_token_is_made_once_with_owner_only_access_and_never_logged(exposed, tmp_path, caplog):
    service, _ = exposed
    path = tmp_path / TOKEN_FILE
    token = path.read_text().strip()
    assert len(token) >= 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert service.token.matches(token) and not service.token.matches(token[:-1] + "x")
    logged = "\n".join(r.getMessage() for r in caplog.get_records("setup"))
    assert str(path) in logged and token not in logged and token not in repr(service.token)
    again = MonitorService(MonitorConfig(run_dir=tmp_path, dashboard_host="0.0.0.0", dashboard_port=0))
    assert again.token.matches(token)  # a restart keeps what the operator already has
    again.store.close()


def test_the_dashboard_wants_the_token_on_every_path_but_healthz(exposed, tmp_path):
    _, url = exposed
    token = (tmp_path / TOKEN_FILE).read_text().strip()
    for path in ("/", "/api/dashboard", "/static/plotly.min.js", "/nope"):
        assert request(url, path).status == 401, path
        assert request(url, path, {"Authorization": "Bearer wrong-token-of-some-length"}).status == 401
    assert request(url, "/healthz").status == 200  # probes stay open
    assert request(url, "/api/dashboard", {"Authorization": f"Bearer {token}"}).status == 200
    assert request(url, "/?token=not-the-token-at-all").status == 401
    step = request(url, f"/?token={token}")  # a browser: the cookie is set, the token leaves the URL
    assert step.status == 303 and step.getheader("Location") == "/"
    cookie = step.getheader("Set-Cookie")
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    page = request(url, "/", {"Cookie": cookie.split(";", 1)[0]})
    assert page.status == 200
    assert request(url, "/", {"Cookie": f"{COOKIE}=forged-cookie-value-xyz"}).status == 401


def test_report_wants_the_token_over_grpc(exposed, tmp_path, monkeypatch):
    service, _ = exposed
    token = (tmp_path / TOKEN_FILE).read_text().strip()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    service.register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.delenv("M1FLOW_ACCESS_TOKEN", raising=False)
        with pytest.raises(grpc.RpcError) as refused:
            report(f"127.0.0.1:{port}")
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED and "Bearer" in refused.value.details()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError):
            rpc_grpc.MonitorServiceStub(channel).Report(rpc.ReportRequest(), timeout=10,
                                                        metadata=(("authorization", "Bearer x" * 3),))
        assert report(f"127.0.0.1:{port}", token=token).dashboard_url == ""
        monkeypatch.setenv("M1FLOW_ACCESS_TOKEN_FILE", str(tmp_path / TOKEN_FILE))
        report(f"127.0.0.1:{port}")  # what `m1flow report` sends, from the environment
    finally:
        server.stop(0)


def test_on_loopback_nothing_is_asked_and_a_given_token_is_used(tmp_path):
    local = MonitorService(MonitorConfig(run_dir=tmp_path))
    assert local.token is None and not (tmp_path / TOKEN_FILE).exists()
    local.store.close()
    given = MonitorService(MonitorConfig(run_dir=tmp_path / "b", access_token="a-given-token-0123456789"))
    assert given.token.matches("a-given-token-0123456789") and not (tmp_path / "b" / TOKEN_FILE).exists()
    assert "a-given-token" not in given.config.model_dump_json()  # a config dump shows no secret
    given.store.close()
    secret = tmp_path / "secret"
    secret.write_text("from-a-mounted-secret-42\n")
    mounted = MonitorService(MonitorConfig(run_dir=tmp_path / "c", access_token_file=secret, dashboard_host="0.0.0.0"))
    assert mounted.token.matches("from-a-mounted-secret-42")
    mounted.store.close()


def test_a_bad_token_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="shorter than 16"):
        MonitorService(MonitorConfig(run_dir=tmp_path, access_token="short"))
    with pytest.raises(SystemExit, match="cannot read the monitor's access token file"):
        MonitorService(MonitorConfig(run_dir=tmp_path, access_token_file=tmp_path / "missing"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SystemExit, match="is empty"):
        MonitorService(MonitorConfig(run_dir=tmp_path, access_token_file=tmp_path / "empty"))
