"""An unmodified MLP training loop (it never mentions adaptive eager); prints its stats.

Run by ``test_ae_api.py`` under ``TORCHNEURON_ADAPTIVE_EAGER=1`` and under
``python -m torchneuron.run``.
"""

import json

import torch

import torchneuron

torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("neuron")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x, y = torch.randn(8, 16, device="neuron"), torch.randn(8, 4, device="neuron")
for _ in range(6):
    loss = torch.nn.functional.mse_loss(m(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    loss.item()
print(json.dumps(torchneuron.adaptive_eager.stats()))
