#!/usr/bin/env python3
"""The hand-written PyTorch loop that dasim's whole-run speed is compared against.

What a researcher would write to simulate the perf scenarios without dasim: one `nn.Module`
and one optimizer per worker, a heap of step-completion events on a simulated clock (one 4x
straggler), and for each event the real gradient of that worker's minibatch. It mirrors
`scenarios/perf/transformer-4x128.toml` (a nanoGPT-style character GPT: pre-norm blocks, exact
GELU, learned positions, output tied to the embedding, on Tiny Shakespeare) and
`scenarios/perf/resnet20.toml` (the CIFAR ResNet-20 of He et al. with type-A shortcuts, on
generated 3x32x32 images), each under

- all-reduce: every round, all workers' gradients, averaged, one step of every replica;
- AD-PSGD with one pairwise average per step: the worker that finishes averages its model with
  a random ring neighbour's, then applies its gradient.

Each algorithm's wall time covers what dasim's `timings.json` covers: building the replicas, an
evaluation at the start and at the stop (of the average model, on the held-out split), and the
training steps. It prints worker steps per wall second and the peak resident memory, so that it
can be run alternately with `dasim run` on the same machine (the book's performance chapter).

    python3 models/benches/pytorch_loop.py --model gpt --steps 48 --threads 2
    python3 models/benches/pytorch_loop.py --model resnet20 --steps 48 --threads 2

Not a test and not part of the build: torch is not a dependency of dasim.
"""

import argparse
import gzip
import heapq
import math
import resource
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]


class Block(nn.Module):
    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, d_ff)
        self.fc2 = nn.Linear(d_ff, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, context, layers, d, heads, d_ff):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads, d_ff) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        # nanoGPT's initialization, as dasim's: N(0, 0.02²), the residual projections
        # N(0, (0.02/√(2·layers))²), biases 0.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.pad = cout - cin
        self.stride = stride

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x
        if self.stride != 1 or self.pad:
            s = F.pad(x[:, :, :: self.stride, :: self.stride], (0, 0, 0, 0, 0, self.pad))
        return F.relu(y + s)


class ResNet20(nn.Module):
    def __init__(self, width=16, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(3):
                blocks.append(BasicBlock(cin, cout, 2 if stage > 0 and i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.fc(x.mean(dim=(2, 3)))


def text_data(context):
    with gzip.open(ROOT / "models/data/tinyshakespeare.txt.gz", "rt") as f:
        text = f.read()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    cut = int(len(ids) * 0.99)
    return len(chars), ids[:cut], ids[cut:]


def windows(ids, starts, context):
    w = torch.stack([ids[s : s + context + 1] for s in starts])
    return w[:, :-1], w[:, 1:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["gpt", "resnet20"], default="gpt")
    p.add_argument("--algo", choices=["allreduce", "adpsgd", "both"], default="both")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--steps", type=int, default=48, help="worker steps per algorithm")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    n = a.workers

    if a.model == "gpt":
        context, batch = 128, 16
        vocab, train, test = text_data(context)

        def make():
            return Gpt(vocab, context, 4, 128, 4, 512)

        def minibatch():
            starts = torch.randint(0, len(train) - context - 1, (batch,), generator=gen)
            return windows(train, starts.tolist(), context)

        test_starts = list(range(0, len(test) - context - 1, context))
        held_out = [windows(test, test_starts[i : i + 64], context) for i in range(0, len(test_starts), 64)]

        def loss_of(model, x, y):
            return F.cross_entropy(model(x).view(-1, vocab), y.reshape(-1))

        step_ms, lr = 100.0, 0.1
    else:
        batch = 32
        images = torch.randn(2000, 3, 32, 32, generator=gen)
        labels = torch.randint(0, 10, (2000,), generator=gen)

        def make():
            return ResNet20()

        def minibatch():
            i = torch.randint(0, 1600, (batch,), generator=gen)
            return images[i], labels[i]

        held_out = [(images[s : s + 100], labels[s : s + 100]) for s in range(1600, 2000, 100)]

        def loss_of(model, x, y):
            return F.cross_entropy(model(x), y)

        step_ms, lr = 50.0, 0.05

    def evaluate(models):
        with torch.no_grad():
            avg = make()
            for p_avg, *ps in zip(avg.state_dict().values(), *(m.state_dict().values() for m in models)):
                if p_avg.is_floating_point():
                    p_avg.copy_(torch.stack(ps).mean(0))
            avg.eval()
            total = sum(loss_of(avg, x, y).item() for x, y in held_out)
        return total / len(held_out)

    def step_time(w):
        return step_ms * (4.0 if w == 5 else 1.0)

    # The same-run reference: a 2,048 x 2,048 f32 matrix product on the same threads.
    m1, m2 = torch.randn(2048, 2048), torch.randn(2048, 2048)
    m1 @ m2
    t0 = time.perf_counter()
    for _ in range(5):
        m1 @ m2
    print(f"matrix product 2048^3: {5 * 2 * 2048**3 / (time.perf_counter() - t0) / 1e9:.0f} GFLOP/s")

    algos = ["allreduce", "adpsgd"] if a.algo == "both" else [a.algo]
    for algo in algos:
        start = time.perf_counter()
        models = [make() for _ in range(n)]
        for m in models[1:]:
            m.load_state_dict(models[0].state_dict())
        opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9) for m in models]
        first = evaluate(models)
        done = 0
        if algo == "allreduce":
            while done < a.steps:
                grads = []
                for m in models:
                    m.zero_grad(set_to_none=True)
                    x, y = minibatch()
                    loss_of(m, x, y).backward()
                    grads.append([q.grad for q in m.parameters()])
                with torch.no_grad():
                    mean = [torch.stack(gs).mean(0) for gs in zip(*grads)]
                    for m, o in zip(models, opts):
                        for q, g in zip(m.parameters(), mean):
                            q.grad.copy_(g)
                        o.step()
                done += n
        else:
            events = [(step_time(w), w) for w in range(n)]
            heapq.heapify(events)
            while done < a.steps:
                t, w = heapq.heappop(events)
                m = models[w]
                m.zero_grad(set_to_none=True)
                x, y = minibatch()
                loss_of(m, x, y).backward()
                peer = models[(w + (1 if torch.rand(1, generator=gen).item() < 0.5 else -1)) % n]
                with torch.no_grad():
                    for q, r in zip(m.parameters(), peer.parameters()):
                        q.add_(r).mul_(0.5)
                        r.copy_(q)
                opts[w].step()
                done += 1
                heapq.heappush(events, (t + step_time(w), w))
        last = evaluate(models)
        wall = time.perf_counter() - start
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{a.model} {algo}: {done} worker steps in {wall:.2f} s = {done / wall:.2f} steps/s; "
            f"loss {first:.3f} -> {last:.3f}; peak RSS {rss:.0f} MB"
        )
        assert math.isfinite(last)


if __name__ == "__main__":
    main()
