from m1flow.runtime.service import main
from svc_monitor.service import MonitorService

main(MonitorService)
