"""Train the CNN classifier on synthetic images, optionally recording a torch.profiler trace.

    python train.py --steps 4                          # just train
    python train.py --steps 4 --profile-dir kineto     # and record steps 2-3 as a Kineto trace

Runs on an Ascend NPU when torch_npu is installed, else on CUDA, else on the CPU. The model is
wrapped in DistributedDataParallel; started without torchrun it is a one-process group.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity
from torch.utils.data import DataLoader

from data import SyntheticImages
from model import CNNClassifier

try:
    import torch_npu  # noqa: F401  (registers the "npu" device and torch.npu)

    HAS_NPU = torch.npu.is_available()
except ImportError:
    HAS_NPU = False


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if HAS_NPU:
        return torch.device("npu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def init_distributed(device: torch.device) -> None:
    # torchrun sets these; a plain `python train.py` runs as rank 0 of 1.
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:  # a free port, so parallel single-process runs do not clash
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    backend = {"npu": "hccl", "cuda": "nccl"}.get(device.type, "gloo")
    dist.init_process_group(backend=backend)


def make_profiler(profile_dir: str, call_stacks: bool) -> torch.profiler.profile:
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    extra = {}
    if call_stacks:
        # Adds a "Call stack" argument to every op (stock PyTorch leaves it out).
        extra["experimental_config"] = torch._C._profiler._ExperimentalConfig(verbose=True)
    return torch.profiler.profile(
        activities=activities,
        with_stack=True,
        record_shapes=True,
        with_modules=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            profile_dir, worker_name="cnn_classifier", use_gzip=True
        ),
        **extra,
    )


def train(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    init_distributed(device)

    dataset = SyntheticImages(length=args.steps * args.batch_size, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)

    model = CNNClassifier().to(device)
    model = DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    profiling = make_profiler(args.profile_dir, args.call_stacks) if args.profile_dir else None
    model.train()
    with profiling if profiling is not None else contextlib.nullcontext():
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if device.type == "npu":
                torch.npu.synchronize()  # make the per-step log line reflect finished work
            print(f"step {step} loss {loss.item():.4f}")
            if profiling is not None:
                profiling.step()
    dist.barrier()  # the gloo workers let go of the last all-reduce before the group is freed
    dist.destroy_process_group()

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto, npu, cuda, cpu, or a torch device")
    parser.add_argument("--profile-dir", default="", help="record a trace of steps 2-3 into DIR")
    parser.add_argument(
        "--call-stacks", action="store_true", help="record the verbose 'Call stack' per op"
    )
    train(parser.parse_args())


if __name__ == "__main__":
    main()
