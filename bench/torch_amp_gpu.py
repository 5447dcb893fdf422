#!/usr/bin/env python3
"""PyTorch eager AMP training throughput on a GPU: the peer baseline for
`bench_train --device cuda:0` (the GPU table: docs/gpu.md, "Benchmarks").

Same models as Chorus (mlp, cnn, cnn-bn), same batches, same measurement as
bench/bench_train.cc: warm-up steps, then windows of ~window_s seconds, median
samples/s. Each step does what a Chorus GPU step does: gather a batch on the
host, copy it to the GPU (pinned, non_blocking), forward under
torch.autocast(float16), GradScaler (dynamic loss scale, Inf/NaN check and
unscale), optimizer step on FP32 parameters, and read the loss back (.item(),
one synchronisation per step, as Chorus's trainer returns the loss).

The optimizer is torch.optim.SGD with momentum (foreach implementation),
which is cheaper than LARS (no per-tensor norms): a conservative baseline for
Chorus, which runs LARS. --optimizer lars runs a LARS step written with
torch._foreach ops instead.

--cuda-graph captures the whole step (forward, backward, unscale, optimizer
step) in one CUDA graph and replays it, with a static loss scale of 1024 (a
dynamic scale's Inf/NaN check needs a synchronisation the graph cannot
hold): the strongest plain-PyTorch baseline for small models, as Chorus
captures its own step. The batch is still gathered on the host and copied
into the graph's static input, and the loss read back, every step.

Usage: python3 bench/torch_amp_gpu.py [--models mlp,cnn,cnn-bn]
           [--batches 64,256,1024] [--optimizer sgd|lars] [--cuda-graph]
           [--windows 7] [--window-s 2] [--warmup 30]
Prints one row per (model, batch) and a JSON line per row to --json FILE.
"""
import argparse
import gzip
import json
import os
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def load_images():
    path = os.path.join(DATA, "train-images-idx3-ubyte.gz")
    lpath = os.path.join(DATA, "train-labels-idx1-ubyte.gz")
    if not os.path.exists(path):
        # Throughput does not depend on the pixel values: synthetic stand-in.
        print(f"note: {path} missing, using random images of the same shape")
        x = torch.rand(60000, 1, 28, 28)
        y = torch.randint(0, 10, (60000,))
        return x, y
    with gzip.open(path) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(lpath) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = torch.from_numpy(x.astype(np.float32) / 255.0)
    x = (x - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    bn = name == "cnn-bn"
    layers = []
    cin = 1
    for cout in (32, 64):
        layers.append(nn.Conv2d(cin, cout, 5, padding=2))
        if bn:
            layers.append(nn.BatchNorm2d(cout))
        layers += [nn.ReLU(), nn.MaxPool2d(2)]
        cin = cout
    layers += [nn.Flatten(), nn.Linear(3136, 256), nn.ReLU(), nn.Linear(256, 10)]
    return nn.Sequential(*layers)


class ForeachLars:
    """LARS as Chorus runs it (trainer/optimizer.h), with torch._foreach ops."""

    def __init__(self, params, lr, momentum=0.9, wd=5e-4, eta=0.01):
        self.params = [p for p in params]
        self.decayed = [p.dim() > 1 for p in self.params]
        self.bufs = [torch.zeros_like(p) for p in self.params]
        self.lr, self.m, self.wd, self.eta = lr, momentum, wd, eta
        # GradScaler.unscale_ (called by GradScaler.step) walks
        # optimizer.param_groups to find the gradients it unscales and checks.
        self.param_groups = [{"params": self.params}]

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        ps = self.params
        gs = [p.grad for p in ps]
        wn = torch._foreach_norm(ps)
        gn = torch._foreach_norm(gs)
        coeffs = []
        for d, w, g in zip(self.decayed, wn, gn):
            if d:
                ratio = torch.where((w > 0) & (g > 0), self.eta * w / (g + self.wd * w),
                                    torch.ones_like(w))
                coeffs.append(self.lr * ratio)
            else:
                coeffs.append(torch.full_like(w, self.lr))
        upd = [g + self.wd * p if d else g for d, p, g in zip(self.decayed, ps, gs)]
        torch._foreach_mul_(upd, coeffs)
        torch._foreach_mul_(self.bufs, self.m)
        torch._foreach_add_(self.bufs, upd)
        torch._foreach_sub_(ps, self.bufs)

    # GradScaler.step calls optimizer.step() only when it found no Inf/NaN.
    def state_dict(self):
        return {}


STATIC_SCALE = 1024.0


def graphed_step(model, opt, batch, device, next_batch, xb_pinned, yb_pinned):
    """The whole step captured in one CUDA graph (warm-up on a side stream
    first, as torch.cuda.graph requires); returns the step that replays it."""
    sx = torch.zeros((batch, 1, 28, 28), device=device)
    sy = torch.zeros((batch,), dtype=torch.int64, device=device)
    params = [p for p in model.parameters()]

    def body():
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(sx), sy)
        (loss * STATIC_SCALE).backward()
        torch._foreach_mul_([p.grad for p in params], 1.0 / STATIC_SCALE)
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = body()

    def step():
        next_batch()
        sx.copy_(xb_pinned, non_blocking=True)
        sy.copy_(yb_pinned, non_blocking=True)
        graph.replay()
        return static_loss.item()

    return step


def bench(model_name, batch, a, x, y, device):
    torch.manual_seed(1)
    model = make_model(model_name).to(device)
    if a.optimizer == "lars":
        opt = ForeachLars(model.parameters(), lr=2.0 * batch / 256)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4,
                              foreach=True)
    scaler = torch.amp.GradScaler("cuda")
    n = x.shape[0]
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(n, generator=g)
    pos = 0
    xb_pinned = torch.empty((batch, 1, 28, 28), pin_memory=True)
    yb_pinned = torch.empty((batch,), dtype=torch.int64, pin_memory=True)

    def next_batch():
        nonlocal pos, perm
        if pos + batch > n:
            perm = torch.randperm(n, generator=g)
            pos = 0
        idx = perm[pos:pos + batch]
        pos += batch
        torch.index_select(x, 0, idx, out=xb_pinned)
        torch.index_select(y, 0, idx, out=yb_pinned)

    def one_step():
        next_batch()
        xb = xb_pinned.to(device, non_blocking=True)
        yb = yb_pinned.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    if a.cuda_graph:
        one_step = graphed_step(model, opt, batch, device, next_batch, xb_pinned, yb_pinned)

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        one_step()
    torch.cuda.synchronize()
    per_step = (time.perf_counter() - t0) / a.warmup
    steps_per_window = max(5, int(a.window_s / per_step))
    rates = []
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(steps_per_window):
            one_step()
        torch.cuda.synchronize()
        rates.append(steps_per_window * batch / (time.perf_counter() - t0))
    return dict(kind="torch_amp_gpu", model=model_name, batch=batch, optimizer=a.optimizer,
                cuda_graph=a.cuda_graph,
                device=torch.cuda.get_device_name(0), torch=torch.__version__,
                samples_per_s_median=statistics.median(rates), samples_per_s_min=min(rates),
                samples_per_s_max=max(rates))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="mlp,cnn,cnn-bn")
    p.add_argument("--batches", default="64,256,1024")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "lars"])
    p.add_argument("--cuda-graph", action="store_true",
                   help="capture the whole step in one CUDA graph (static loss scale)")
    p.add_argument("--windows", type=int, default=7)
    p.add_argument("--window-s", type=float, default=2.0)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--json", default="")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False")
        return
    device = torch.device("cuda:0")
    torch.backends.cudnn.benchmark = True
    x, y = load_images()
    print(f"{'model':<7} {'batch':>6} {'median/s':>12} {'min/s':>12} {'max/s':>12}  "
          f"torch {torch.__version__} AMP fp16, {a.optimizer}"
          f"{', whole step in a CUDA graph' if a.cuda_graph else ', eager'}, {torch.cuda.get_device_name(0)}")
    out = open(a.json, "a") if a.json else None
    for m in a.models.split(","):
        for b in a.batches.split(","):
            r = bench(m, int(b), a, x, y, device)
            print(f"{m:<7} {int(b):>6} {r['samples_per_s_median']:>12.0f} "
                  f"{r['samples_per_s_min']:>12.0f} {r['samples_per_s_max']:>12.0f}", flush=True)
            if out:
                out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
