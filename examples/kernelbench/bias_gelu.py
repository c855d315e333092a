import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Adds a learned per-column bias to a batch of activations, then applies the exact
    (erf-based) GELU: y = gelu(x + b)."""

    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x):
        return F.gelu(x + self.bias)


rows = 8192
features = 4096


def get_inputs():
    return [torch.randn(rows, features)]


def get_init_inputs():
    return [features]
