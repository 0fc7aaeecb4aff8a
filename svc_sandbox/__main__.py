from m1flow.runtime.service import main
from svc_sandbox.service import SandboxService

main(SandboxService)
