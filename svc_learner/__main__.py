from m1flow.runtime.service import main
from svc_learner.service import LearnerService

main(LearnerService)
