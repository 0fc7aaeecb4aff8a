"""The RL algorithm, in one place: what the learner does with scored groups before and during an update.

* `advantages`: advantage estimators by name (GRPO, Dr. GRPO, RLOO), `@register_adv_est`.
* `objectives`: policy losses by name (CISPO, DAPO, GRPO) in the report's unified token form,
  `@register_policy_loss`, and the per-token coefficients the fused LM head evaluates.
* `shaping`: reward shaping on top of the verifier's reward (format reward, DAPO's soft overlong penalty).
* `selection`: what a group may be trained on (completeness, infrastructure failures by the `Status`
  enum, staleness, dynamic sampling) and the group's advantages.
* `filling`: batches of trainable groups (DAPO's dynamic sampling refills the batch), a pure object
  over ScoredGroups the learner and the benchmarks share.
* `legacy`: schema-1 `scored` records (string statuses, rewards already shaped) read as schema 2.
* `config`: the one block that chooses all of it (`LearnerServiceConfig.algorithm`).

The reward service only scores; everything here runs in the learner. Submodules are imported
explicitly (`objectives` needs torch; the rest does not).
"""
