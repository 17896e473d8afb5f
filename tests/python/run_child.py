"""A small training run inside a ckpt.Run, for test_run.py's interrupted-and-resumed
test (started as a subprocess; not a test module itself).

Usage: run_child.py RUN_DIR OUT [--handshake]

Trains 3 epochs of 8 batches (a shuffling DataLoader, dropout, Adam; the
step also draws from Python's and numpy's generators), saving every 5 steps,
the encoder in its own file. With --handshake it prints
"at GLOBAL_STEP saved LAST_SAVED_STEP" at the start of every step and waits
for a line on stdin before training it (so the parent can SIGKILL it at a
known point). At the end it prints "start STAGE STEP" and "first STEP" (the
first step this process trained) and torch.saves the model's and the
optimizer's state_dict to OUT.
"""

import random
import sys

import numpy as np
import torch

import ckpt


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Dropout(0.3))
        self.head = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.encoder(x))


def main() -> int:
    run_dir, out = sys.argv[1], sys.argv[2]
    handshake = "--handshake" in sys.argv[3:]
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    x = torch.randn(64, 8)
    y = (x[:, :1] * 2 - x[:, 1:2]).tanh()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=True)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    first = None
    with ckpt.Run(run_dir, model=model, optimizer=optimizer, files={"encoder": "encoder.safetensors"},
                  save_every_steps=5, keep_last=2) as run:
        with run.init():
            torch.randn(5)  # the init body draws randomness on every start
            random.random()
        print("start", "fresh" if run.fresh else "continue", run.start_step, flush=True)
        for _ in run.epochs(3):
            for xb, yb in run.steps(loader):
                if handshake:
                    print("at", run.global_step, "saved", run.last_saved_step, flush=True)
                    if not sys.stdin.readline():
                        return 3
                if first is None:
                    first = run.global_step + 1
                scale = 1.0 + 0.01 * random.random() + 0.01 * float(np.random.rand())
                loss = torch.nn.functional.mse_loss(model(xb), yb) * scale
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            with torch.no_grad():
                model.eval()
                dev = torch.nn.functional.mse_loss(model(x), y).item()
                model.train()
            run.report(dev_loss=dev)
    print("first", first, flush=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
