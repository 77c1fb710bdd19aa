import torch
from conftest import check


def test_clone_and_view():
    def f(x):
        return x.clone().reshape(-1), x.view(3, 2)

    check(f, torch.randn(2, 3))
