"""在昇腾 NPU 上微调一个小分类器 (entry script of a small Ascend fine-tuning job)."""

import os

os.environ["ASCEND_LAUNCH_BLOCKING"] = "1"  # debugging leftover
os.environ.setdefault("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:2048")
os.putenv("HCCL_ALGO", "level0:ring")

import argparse
import time

import torch
import torch_npu  # noqa: F401  registers the npu device
from torch import nn
from torch.utils.data import DataLoader, Dataset

torch_npu.npu.set_compile_mode(jit_compile=True)


class RandomImages(Dataset):
    def __init__(self, n: int = 256) -> None:
        self.x = torch.randn(n, 3, 32, 32)
        self.y = torch.randint(0, 10, (n,))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def build_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))


def train(args, model, device):
    loader = DataLoader(RandomImages(), batch_size=args.batch_size, shuffle=True, num_workers=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss()
    running_loss = 0.0
    for step, (images, labels) in enumerate(loader):
        images = images.to(device)
        labels = labels.to(device)
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        running_loss += loss.item()
        print(f"step {step} loss {loss.item():.4f}")
        torch.npu.synchronize()
        torch.npu.empty_cache()  # 释放缓存
    return running_loss


def evaluate(model, device):
    loader = DataLoader(RandomImages(64), batch_size=16)
    correct = 0
    start = time.perf_counter()
    for images, labels in loader:
        logits = model(images.to(device))
        correct += (logits.argmax(-1).cpu() == labels).sum().item()
        torch.npu.synchronize()
    print(f"eval took {time.perf_counter() - start:.2f}s")
    return correct


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    device = torch.device("npu:0")
    model = build_model().to(device)
    train(args, model, device)
    evaluate(model, device)


if __name__ == "__main__":
    main()
