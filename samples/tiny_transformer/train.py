"""Train the tiny transformer on synthetic token sequences, optionally recording a profile.

    python train.py --steps 4                          # just train
    python train.py --steps 4 --profile-dir kineto     # and record steps 2-3 as a Kineto trace

A plain single-process loop: AdamW (the default, unfused implementation), gradient clipping,
and the loss printed every step.
"""

from __future__ import annotations

import argparse
import contextlib

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity
from torch.utils.data import DataLoader, Dataset

from model import Config, TinyTransformer

try:
    import torch_npu  # noqa: F401  (registers the "npu" device and torch.npu)

    HAS_NPU = torch.npu.is_available()
except ImportError:
    HAS_NPU = False


class RandomTokens(Dataset):
    """Token sequences with a learnable rule (each token is the previous one plus one)."""

    def __init__(self, length: int, seq_len: int, vocab_size: int, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, vocab_size, (length, 1), generator=gen)
        self.tokens = (starts + torch.arange(seq_len + 1)) % vocab_size

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        seq = self.tokens[index]
        return seq[:-1], seq[1:]


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if HAS_NPU:
        return torch.device("npu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


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
            profile_dir, worker_name="tiny_transformer", use_gzip=True
        ),
        **extra,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto, npu, cuda, cpu, or a torch device")
    parser.add_argument("--profile-dir", default="", help="record a trace of steps 2-3 into DIR")
    parser.add_argument(
        "--call-stacks", action="store_true", help="record the verbose 'Call stack' per op"
    )
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    cfg = Config(max_seq_len=args.seq_len)
    model = TinyTransformer(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    dataset = RandomTokens(args.steps * args.batch_size, args.seq_len, cfg.vocab_size, args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)

    profiling = make_profiler(args.profile_dir, args.call_stacks) if args.profile_dir else None
    model.train()
    with profiling if profiling is not None else contextlib.nullcontext():
        for step, (tokens, targets) in enumerate(loader):
            tokens, targets = tokens.to(device), targets.to(device)
            logits = model(tokens)
            loss = F.cross_entropy(logits.view(-1, cfg.vocab_size), targets.view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            print(f"step {step} loss {loss.item():.4f}")
            if profiling is not None:
                profiling.step()


if __name__ == "__main__":
    main()
