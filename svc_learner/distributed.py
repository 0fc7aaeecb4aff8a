"""Data-parallel learner steps: `torchrun --nproc-per-node N -m svc_learner`; the exchange between ranks.

Rank 0 selects and builds each batch and broadcasts it; every rank takes a strided share of each
minibatch, so global minibatch j holds the same samples for any world size. Gradients are
summed across ranks by DDP (gloo on CPU, NCCL on GPU; the model on the rank's own GPU), or
reduce-scattered by FSDP2 (`train.fsdp`: parameters, gradients and optimizer state sharded per
decoder layer), and the loss of each rank is normalised by the global token / response counts, so
one distributed update equals the single-process update.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint as activation_checkpoint

from .batching import Batch
from .update import Ranks, SequenceLogprobs, TrainConfig


@dataclass(frozen=True)
class ProcessGroupRanks(Ranks):
    """Ranks of the default process group; sums are all-reduces."""

    def sum(self, x: Tensor) -> Tensor:
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def max(self, x: Tensor) -> Tensor:
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
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


def wrap_model(model: nn.Module, cfg: TrainConfig, ranks: Ranks) -> nn.Module:
    """The scorer the update runs on: SequenceLogprobs, with activation checkpointing if asked;
    around it DDP, or FSDP2 (each decoder layer, then the scorer, sharded) when there are several ranks."""
    if cfg.activation_checkpointing:
        for layer in decoder_layers(model):
            checkpoint_activations(layer)
    scorer = SequenceLogprobs.configured(model, cfg)
    if ranks.world == 1:
        return scorer
    device = next(model.parameters()).device
    if cfg.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (ranks.world,))
        for layer in decoder_layers(model):
            fully_shard(layer, mesh=mesh)
        fully_shard(scorer, mesh=mesh)  # the root: embeddings, final norm and the head, gathered per forward
        scorer.sharded = True
        return scorer
    device_ids = None
    if device.type == "cuda":  # the rank's own GPU (init_distributed set it from LOCAL_RANK)
        device_ids = [device.index if device.index is not None else torch.cuda.current_device()]
    # MoE routing leaves some experts without tokens in a minibatch: their grads are simply absent
    return DistributedDataParallel(scorer, device_ids=device_ids, find_unused_parameters=True)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of a transformers causal LM or the hybrid model (`model.layers` of both)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"cannot find the decoder layers of {type(model).__name__} (expected model.layers)")
    return list(layers)


def checkpoint_activations(layer: nn.Module) -> None:
    """Recompute the layer's activations in backward (non-reentrant checkpoint around its forward).
    The module itself stays as it is, so parameter names and checkpoints do not change."""
    inner = layer.forward

    def forward(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return activation_checkpoint(inner, *args, use_reentrant=False, **kwargs)

    layer.forward = forward


def broadcast_batch(batch: Batch | None) -> None:
    """Rank 0 hands the batch it built (or None: stop) to the other torchrun ranks."""
    share(batch)


def receive_batch() -> Batch | None:
    """What broadcast_batch sent: the next batch, or None when rank 0 stops."""
    return share()
