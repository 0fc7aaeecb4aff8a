"""svc_learner: the learner service. Layout: batching (selected groups -> tensors), update (the
minibatch update loop), distributed (torchrun ranks), trainer (state, checkpoints, `step`), service
(Kafka in, `policy` out). The algorithm itself is m1flow.rl."""
