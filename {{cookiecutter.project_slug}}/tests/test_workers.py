"""The number of DataLoader workers changes nothing: each sample's random augmentation is a
function of (seed, epoch, index), not of which worker process loaded it or what it loaded before
(tests/test_loader.py shows the loader itself, and what happens without the keyed seeding)."""

from __future__ import annotations

from conftest import train_all


def test_zero_and_two_workers_give_the_same_weights_and_every_metrics_row(tmp_path):
    runs = train_all(tmp_path, {"no_workers": ("--num-workers", "0"), "two_workers": ("--num-workers", "2")})
    assert runs["no_workers"].weights == runs["two_workers"].weights
    assert runs["no_workers"].metrics == runs["two_workers"].metrics
