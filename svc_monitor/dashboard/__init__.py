"""The monitor's web page: plotly figures built from the store, served over HTTP, refreshing itself."""
from svc_monitor.dashboard.server import Dashboard

__all__ = ["Dashboard"]
