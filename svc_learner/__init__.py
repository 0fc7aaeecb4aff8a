from .objective import policy_loss
