"""The score statuses that mean "our infrastructure failed", not "the sample was bad".

The reward service marks such samples and the learner leaves them out; both read this one set.
"""
INFRA_FAILURE_STATUSES = frozenset({"timeout", "sandbox_error", "judge_error"})
