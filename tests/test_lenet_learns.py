"""8.4's LeNet learns: the chapter's own training loop (`lenet_data_parallel`: `split_and_load`,
a forward and backward per device, `allreduce`, `d2l.sgd`, `d2l.evaluate_accuracy`), run on the
real engine over one or two CPU devices for a few hundred images of the synthetic Fashion-MNIST
stand-in (class prototypes blended, shifted and noised: learnable), reaches a test accuracy far
above the 0.1 of guessing among 10 classes.

The chapter's weights of scale 0.01 keep LeNet at chance through its first epoch of 60000 images
(asyncsim.lab.data says so); to learn from a few hundred, the test starts it from weights of
scale 0.1, through `lenet_params`'s own `scale`, and trains at lr 0.05 with batches of 16. Over
session seeds 0-11 the last epoch's accuracy was 0.84-0.93 on one device and on two (0.69-0.88
on synthetic sets of other seeds), so 0.5 leaves a wide margin.
"""

from __future__ import annotations

import functools
import re

import pytest

import realexec
from asyncsim.lab import data
from asyncsim.lab.scenarios import data_parallel as dp

EPOCHS = 6
THRESHOLD = 0.5  # five times chance


@pytest.mark.parametrize("num_devices", [1, 2])
def test_lenet_on_cpu_devices_reaches_accuracy_well_above_chance(num_devices, monkeypatch,
                                                                 capsys):
    """Six epochs of 512 synthetic images, batch 16 split over `num_devices` CPU devices: the
    accuracy on 200 test images printed after the last epoch is at least 0.5."""
    monkeypatch.delenv(data.ENV_VAR, raising=False)  # the synthetic set, whatever the machine
    monkeypatch.setattr(dp, "lenet_params", functools.partial(dp.lenet_params, scale=0.1))
    with realexec.session(workers=2, seed=0) as nd:
        dp.lenet_data_parallel(nd, num_devices=num_devices, batch_size=16, lr=0.05,
                               epochs=EPOCHS, devices="cpu", num_train=512, num_test=200)
    out = capsys.readouterr().out
    assert "the data is SYNTHETIC" in out
    devices = ", ".join(f"cpu({i})" for i in range(num_devices))
    assert f"running on: [{devices}]" in out
    accuracies = [float(a) for a in re.findall(r"^epoch \d+, time [\d.]+ sec, test acc ([\d.]+)$",
                                               out, flags=re.MULTILINE)]
    assert len(accuracies) == EPOCHS, out
    assert accuracies[-1] >= THRESHOLD, f"test accuracy by epoch: {accuracies}"
