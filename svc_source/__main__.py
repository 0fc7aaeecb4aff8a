from m1flow.runtime.service import main
from svc_source.service import SourceService

main(SourceService)
