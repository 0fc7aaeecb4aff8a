from m1flow.runtime.service import main
from svc_eval.service import EvalService

main(EvalService)
