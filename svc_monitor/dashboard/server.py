"""The dashboard's HTTP server: the page, plotly.js from the installed plotly package (the machine
may have no internet), and the data the page refreshes itself from."""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from svc_monitor.access import AccessToken, cookie_header, token_from_http
from svc_monitor.config import MonitorConfig
from svc_monitor.dashboard.figures import Figures
from svc_monitor.store import Store

log = logging.getLogger(__name__)
PAGE = Path(__file__).with_name("page.html")
GROUP_PAGE = Path(__file__).with_name("group.html")


def group_story(cfg: MonitorConfig, group_id: str, scored_ms: int | None) -> dict[str, Any]:
    """m1flow trace's story of a group, as JSON: read from the topics, around its scoring time when
    the store knows it (a few partitions' minutes), else back from the end of its partitions."""
    from m1flow.bus.seek import PartitionReader
    from m1flow.trace.story import Tracer, TraceOptions

    options = TraceOptions(around_ms=scored_ms, algorithm=cfg.algorithm)
    with PartitionReader(cfg.bootstrap, client_id="m1flow-monitor-trace") as reader:
        return Tracer(reader, options).tell(group_id).to_json()


def plotly_js() -> bytes:
    return resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()


class Dashboard:
    def __init__(self, store: Store, cfg: MonitorConfig, state: Callable[[], dict[str, Any]] = dict,
                 token: AccessToken | None = None) -> None:
        self.token = token  # None: on loopback, open as before; else every path but /healthz needs it
        self.store = store
        self.cfg = cfg
        self.figures = Figures(store, cfg, state)
        self.page = PAGE.read_text().replace("{{REFRESH_MS}}", str(int(cfg.dashboard_refresh_s * 1000)))
        self.page = self.page.replace("{{RUN_ID}}", cfg.run_id)
        self.group_page = GROUP_PAGE.read_text().replace("{{RUN_ID}}", cfg.run_id)
        self.js = plotly_js()
        self.server = ThreadingHTTPServer((cfg.dashboard_host, cfg.dashboard_port), self._handler())
        self.server.daemon_threads = True
        host = "127.0.0.1" if cfg.dashboard_host in ("0.0.0.0", "::") else cfg.dashboard_host
        self.url = f"http://{host}:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, name="dashboard", daemon=True)

    def start(self) -> str:
        self.thread.start()
        log.info("dashboard on %s", self.url)
        return self.url

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class, bound to this dashboard (http.server makes one per request)."""
        return type("Handler", (DashboardHandler,), {"dashboard": self})


class DashboardHandler(BaseHTTPRequestHandler):
    """GET /: the page; /static/plotly.min.js; /api/dashboard: the figures' data; /group?id=G: one
    group's story (its data from /api/group?id=G, m1flow.trace); /healthz. Beyond loopback every
    path but /healthz needs the monitor's access token."""

    dashboard: Dashboard

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path, _, query = self.path.partition("?")
        if path != "/healthz" and self.dashboard.token is not None and not self._admitted(path, query):
            return
        if path == "/":
            self._send(self.dashboard.page.encode(), "text/html; charset=utf-8")
        elif path == "/static/plotly.min.js":
            self._send(self.dashboard.js, "application/javascript", cache=True)
        elif path == "/api/dashboard":
            self._data()
        elif path == "/group":
            self._send(self.dashboard.group_page.encode(), "text/html; charset=utf-8")
        elif path == "/api/group":
            self._group(parse_qs(query).get("id", [""])[0])
        elif path == "/healthz":
            self._send(b"ok", "text/plain")
        else:
            self._send(b"not found", "text/plain", status=HTTPStatus.NOT_FOUND)

    def _data(self) -> None:
        try:
            body = json.dumps(self.dashboard.figures.build(), default=str).encode()
        except Exception as exc:  # noqa: BLE001 - the page shows it and retries
            log.exception("dashboard data failed")
            self._send(json.dumps({"error": repr(exc)}).encode(), "application/json",
                       status=HTTPStatus.INTERNAL_SERVER_ERROR)
            return
        self._send(body, "application/json")

    def _group(self, group_id: str) -> None:
        """The group's story from the topics, searched around the time the store says it was scored."""
        if not group_id:
            self._send(b'{"error": "no ?id= given"}', "application/json", status=HTTPStatus.BAD_REQUEST)
            return
        try:
            story = group_story(self.dashboard.cfg, group_id, self.dashboard.store.group_time(group_id))
        except Exception as exc:  # noqa: BLE001 - the page shows it
            log.exception("group %s: trace failed", group_id)
            self._send(json.dumps({"error": repr(exc)}).encode(), "application/json",
                       status=HTTPStatus.INTERNAL_SERVER_ERROR)
            return
        self._send(json.dumps(story, default=str).encode(), "application/json")

    def _admitted(self, path: str, query: str) -> bool:
        """A valid token passes; one in the URL sets the cookie and drops it from the URL."""
        presented, in_url = token_from_http(self.headers, query)
        if not self.dashboard.token.matches(presented):
            self._send(b"the dashboard listens beyond loopback: open it as /?token=<token> (the "
                       b"monitor's access token: access_token_file, or run_dir/access_token) or send "
                       b"'Authorization: Bearer <token>'\n", "text/plain", status=HTTPStatus.UNAUTHORIZED)
            return False
        if in_url:
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header("Location", path)
            self.send_header("Set-Cookie", cookie_header(self.dashboard.token))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        return True

    def _send(self, body: bytes, kind: str, status: HTTPStatus = HTTPStatus.OK, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=86400" if cache else "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        log.debug("dashboard %s", fmt % args)
