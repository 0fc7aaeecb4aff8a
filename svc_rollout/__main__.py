from m1flow.runtime.service import main
from svc_rollout.service import RolloutService

main(RolloutService)
