"""`python -m svc_learner`, or `torchrun --nproc-per-node N -m svc_learner`: rank 0 is the service
(Kafka, gRPC, checkpoints, announcements); the other ranks only train on the batches it broadcasts."""
import os
import signal

from m1flow.runtime import logs
from m1flow.runtime.service import main
from svc_learner.config import LearnerServiceConfig
from svc_learner.distributed import init_distributed
from svc_learner.service import LearnerService
from svc_learner.trainer import follow

if int(os.environ.get("RANK", "0")) == 0:
    main(LearnerService)
else:
    # SIGTERM reaches every rank (torchrun forwards it, launchers signal the process group); rank 0
    # drains and then tells the others to stop, so they wait for that instead of dying mid-step.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = LearnerServiceConfig.load()
    logs.setup("learner", int(os.environ["RANK"]), config.log_level, config.log_json)
    follow(config, init_distributed())
