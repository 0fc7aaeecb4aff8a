"""Data-parallel learner steps: `torchrun --nproc-per-node N -m svc_learner`; the exchange between ranks.

Rank 0 selects and builds each batch and broadcasts it; every rank takes a strided share of each
minibatch, so global minibatch j holds the same samples for any world size. Gradients are
summed across ranks by DDP (gloo on CPU, NCCL on GPU), and the loss of each rank is normalised by
the global token / response counts, so one distributed update equals the single-process update.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from .batching import Batch
from .update import LearnerConfig, Ranks, SequenceLogprobs


@dataclass(frozen=True)
class ProcessGroupRanks(Ranks):
    """Ranks of the default process group; sums are all-reduces."""

    def sum(self, x: Tensor) -> Tensor:
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out


def init_distributed(backend: str | None = None) -> Ranks:
    """Join the torchrun process group if launched by torchrun (WORLD_SIZE > 1), else one process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Ranks()
    if not dist.is_initialized():
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    return ProcessGroupRanks(rank=dist.get_rank(), world=dist.get_world_size())


def share(payload: object = None) -> object:
    """Rank 0's payload, on every rank: rank 0 passes it, the others call with nothing."""
    box = [payload]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def leave() -> None:
    """Leave the process group together: gloo aborts when a peer tears down mid-conversation."""
    dist.barrier()
    dist.destroy_process_group()


def shard_batch(batch: Batch, rank: int, world: int) -> Batch:
    """Strided share of a batch: samples rank, rank + world, ... (the layout the update uses)."""
    return batch.select(torch.arange(rank, len(batch), world))


def wrap_model(model: nn.Module, cfg: LearnerConfig, ranks: Ranks) -> nn.Module:
    """The scorer the update runs on: DDP around SequenceLogprobs when there are several ranks."""
    scorer = SequenceLogprobs.configured(model, cfg)
    if ranks.world == 1:
        return scorer
    device_ids = [torch.cuda.current_device()] if next(model.parameters()).is_cuda else None
    # MoE routing leaves some experts without tokens in a minibatch: their grads are simply absent
    return DistributedDataParallel(scorer, device_ids=device_ids, find_unused_parameters=True)


def broadcast_batch(batch: Batch | None) -> None:
    """Rank 0 hands the batch it built (or None: stop) to the other torchrun ranks."""
    share(batch)


def receive_batch() -> Batch | None:
    """What broadcast_batch sent: the next batch, or None when rank 0 stops."""
    return share()
