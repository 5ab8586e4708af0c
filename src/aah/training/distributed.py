"""Data-parallel plumbing for torchrun: process group setup and small collectives.

Single process when torchrun's WORLD_SIZE is unset or 1; otherwise gloo on CPU, nccl on CUDA.
Rank 0 writes every file; each rank reads its own data stream.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


#: device names every command takes: "auto" is CUDA when present, else the CPU.
DEVICE_NAMES = ("auto", "cpu", "cuda")


def resolve_device(name: str, local_rank: int = 0, *, what: str = "train.device") -> torch.device:
    """ "auto" picks CUDA when present; a CUDA rank uses its local GPU. ValueError (naming
    `what`, the flag or field) for any other name, or for cuda without a CUDA device."""
    if name not in DEVICE_NAMES:
        raise ValueError(f"{what} must be one of {', '.join(DEVICE_NAMES)}, got {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{what} is 'cuda' but no CUDA device is available")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def setup(device_name: str) -> tuple[DistInfo, torch.device]:
    """Join the torchrun process group when launched by it; return ranks and this rank's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    info = DistInfo(rank=rank, world_size=world_size, local_rank=local_rank)
    device = resolve_device(device_name, local_rank)
    if info.enabled and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return info, device


def teardown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(info: DistInfo, obj: Any) -> Any:
    """Rank 0's `obj` on every rank."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(info: DistInfo, obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def mean_across(info: DistInfo, value: float, device: torch.device) -> float:
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item()) / info.world_size


def any_across(info: DistInfo, flag: bool, device: torch.device) -> bool:
    """True on every rank when any rank says True (used to stop all ranks together)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
