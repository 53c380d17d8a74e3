"""Evaluation runs the model in eval mode, changes nothing in it, gives the same figures twice, and
hands the model back in the mode it found."""

from __future__ import annotations

import pytest
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.train import evaluate, first
from {{ cookiecutter.project_slug }}.utils.data import make_loader
from {{ cookiecutter.project_slug }}.utils.device import to_device

from conftest import settings

CPU = torch.device("cpu")


@pytest.fixture
def model_and_loader():
    """The task's model after a few forward passes in train mode, which move BatchNorm's running
    statistics (if it has any) off their starting values; and a validation loader."""
    config = settings()
    torch.manual_seed(0)
    train_set, val_set = task.make_datasets(config)
    model = task.make_model(config, train_set).train()
    with torch.no_grad():
        for batch in make_loader(first(train_set, 64), batch_size=16, seed=0, train=True):
            model(to_device(batch, CPU)[0])
    return model, make_loader(first(val_set, 70), batch_size=16, seed=0, train=False)  # the last batch short


def test_evaluate_changes_no_parameter_and_no_buffer(model_and_loader):
    model, loader = model_and_loader
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    evaluate(model, loader, CPU)
    changed = [name for name, tensor in model.state_dict().items() if not torch.equal(before[name], tensor)]
    assert not changed, (f"evaluate() changed {', '.join(changed)}: a forward pass in train mode updates what "
                         "BatchNorm's running statistics hold (is model.eval() missing?)")


@pytest.mark.skipif(not hasattr(task, "Net"), reason="about the example's model (BatchNorm), which task.py replaced")
def test_example_model_a_forward_pass_in_train_mode_would_move_its_batchnorm_statistics(model_and_loader):
    """The control of the test above: there is something that a forgotten eval() would change."""
    model, loader = model_and_loader
    before = {name: tensor.clone() for name, tensor in model.state_dict().items() if "running_mean" in name}
    with torch.no_grad():  # no_grad alone: gradients off, BatchNorm still updating
        model(next(iter(loader))[0])
    assert before and any(not torch.equal(before[name], model.state_dict()[name]) for name in before)


@pytest.mark.skipif(not hasattr(task, "Net"), reason="about the example's model (Dropout), which task.py replaced")
@pytest.mark.parametrize("dropout", [0.0, 0.25, 0.9])
def test_example_model_drops_the_share_of_activations_that_dropout_says(dropout):
    """The example's Net(dropout=...), which make_model gives --dropout where task.py reads it: the
    probability of dropping an activation (torch's p), not of keeping it, so that 0 drops nothing.
    Every value trains repeatably, so only this says which way it acts."""
    model = task.Net(num_classes=10, image_size=8, dropout=dropout)
    assert [module.p for module in model.modules() if isinstance(module, torch.nn.Dropout)] == [dropout]


def test_every_forward_pass_of_evaluate_runs_in_eval_mode(model_and_loader):
    model, loader = model_and_loader
    modes = []
    model.register_forward_pre_hook(lambda module, inputs: modes.append(module.training))
    evaluate(model, loader, CPU)
    assert modes and not any(modes)


def test_evaluate_gives_the_same_figures_twice_whatever_the_global_generators_hold(model_and_loader):
    model, loader = model_and_loader
    torch.manual_seed(1)
    first_figures = evaluate(model, loader, CPU)
    torch.manual_seed(2)
    assert evaluate(model, loader, CPU) == first_figures


@pytest.mark.parametrize("training", [True, False])
def test_evaluation_restores_the_mode_it_found(model_and_loader, training):
    model, loader = model_and_loader
    model.train(training)
    evaluate(model, loader, CPU)
    found, left = ("train" if training else "eval"), ("train" if model.training else "eval")
    assert model.training is training, f"evaluate() found the model in {found} mode and left it in {left} mode"
    assert all(module.training is training for module in model.modules())


def test_evaluate_scores_every_sample_of_the_split_once(model_and_loader):
    """An oracle computed here: the figures of evaluate() over its batches of 16 (the last of 6) are
    those of one forward pass over the whole split at once, and its forward passes see each sample
    once. A batch left out, one counted twice, only the last batch's sums kept, or a mean of the
    batches' means (which weighs the short batch's samples more) would each change them."""
    model, loader = model_and_loader
    batches = [to_device(batch, CPU) for batch in loader]
    assert len(batches) > 1, "the oracle needs a split of several batches"
    seen = []
    model.register_forward_pre_hook(lambda module, inputs: seen.append(len(inputs[0])))
    figures = evaluate(model, loader, CPU)
    assert sum(seen) == len(loader.dataset), f"evaluate() passed {sum(seen)} samples of {len(loader.dataset)}"
    inputs, targets = (torch.cat([batch[part] for batch in batches]) for part in (0, 1))
    model.eval()
    with torch.no_grad():
        whole = {name: float(value) for name, value in task.metrics_from_sums(task.batch_sums(model(inputs),
                                                                                             targets)).items()}
    assert figures == pytest.approx(whole, rel=1e-5, abs=1e-7), \
        f"evaluate() gave {figures}; the whole split in one pass gives {whole}"
