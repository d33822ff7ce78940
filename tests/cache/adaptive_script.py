"""An unmodified MLP training loop under adaptive eager; prints losses, step times, stats.

Run twice with one TORCHNEURON_CACHE_DIR by ``test_adaptive_cache.py``.
"""

import json

import torch

import torchneuron
from torchneuron import adaptive_eager

torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("neuron")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(8, 16, device="neuron")
y = torch.randn(8, 4, device="neuron")
core = torchneuron.hardware.get_core(0)
adaptive_eager.enable()
losses, times = [], []
first_replay = None
for step in range(8):
    t0 = core.synchronize()
    loss = torch.nn.functional.mse_loss(m(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
    times.append(core.synchronize() - t0)
    if first_replay is None and adaptive_eager.stats()["replays"]:
        first_replay = step
adaptive_eager.disable()
s = adaptive_eager.stats()
print(json.dumps({"losses": losses, "times": times, "compilations": s["compilations"],
                  "cache_hits": s["cache_hits"], "replays": s["replays"],
                  "first_tier_replays": s["first_tier_replays"],
                  "first_replay_step": first_replay}))
