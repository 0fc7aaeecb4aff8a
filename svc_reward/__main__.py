from m1flow.runtime.service import main
from svc_reward.service import RewardService

main(RewardService)
