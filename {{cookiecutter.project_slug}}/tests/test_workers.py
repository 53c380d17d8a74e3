"""The number of DataLoader workers changes nothing: each sample's random augmentation is a
function of (seed, epoch, index), not of which worker process loaded it or what it loaded before."""

from __future__ import annotations

import numpy as np
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.utils.data import make_loader

from conftest import settings, train_all


def test_zero_and_two_workers_give_the_same_weights_and_every_metrics_row(tmp_path):
    runs = train_all(tmp_path, {"no_workers": ("--num-workers", "0"), "two_workers": ("--num-workers", "2")})
    assert runs["no_workers"].weights == runs["two_workers"].weights
    assert runs["no_workers"].metrics == runs["two_workers"].metrics


class DrawsWithoutSaying(torch.utils.data.Dataset):
    """The task's first samples, each shifted by a number drawn from NumPy's global generator, while
    it says it draws from none (`draws_from = ()`): the loader then seeds nothing before a sample."""

    draws_from = ()

    def __init__(self) -> None:
        train_set, _ = task.make_datasets(settings())
        self.samples = [train_set[index] for index in range(32)]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        inputs, target = self.samples[index]
        return torch.as_tensor(inputs) + float(np.random.rand()), target


def one_epoch(dataset, num_workers: int) -> torch.Tensor:
    loader = make_loader(dataset, batch_size=8, seed=3, train=True, num_workers=num_workers)
    loader.sampler.set_epoch(0)
    return torch.cat([torch.as_tensor(inputs).flatten() for inputs, _ in loader])


def test_negative_control_a_generator_left_to_each_worker_gives_other_samples():
    """What the keyed seeding prevents: a generator that nobody seeds per sample draws from each
    worker's own stream, so two workers hand out other augmentations than none."""
    dataset = DrawsWithoutSaying()
    np.random.seed(0)
    assert not torch.equal(one_epoch(dataset, num_workers=0), one_epoch(dataset, num_workers=2))
