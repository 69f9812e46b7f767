"""The notebooks' helpers (`asyncsim.lab.exercises.lesson`): the book's printed times are held
against the preset of the machine that printed them unless another is named, and building a
preset from the chapters' workloads prints nothing of theirs."""

from __future__ import annotations

from asyncsim.lab import presets
from asyncsim.lab.exercises import lesson
from asyncsim.model.profile import Profile


def test_the_book_is_predicted_on_its_own_machine_unless_told():
    """The PyTorch page's numbers on its preset by default, and on the one named when named."""
    assert "on profile book-torch" in lesson.against_book("torch_warmup")
    assert "on profile book," in lesson.against_book("torch_warmup", profile="book")
    assert "on profile book-zh" in lesson.against_book("hybridize_mlp")


def test_building_the_gpu_preset_prints_nothing(capsys):
    """The chapter's training loops print their epochs and the data loader its notice when
    recorded: the preset records them without a word on stdout."""
    presets.book_gpu.cache_clear()
    profile = Profile.preset("book-gpu")
    assert profile.name == "book-gpu" and profile.gpus >= 1
    assert capsys.readouterr().out == ""
