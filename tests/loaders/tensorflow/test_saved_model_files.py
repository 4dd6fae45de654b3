"""saved_model_check: what a complete SavedModel holds, on SavedModels TensorFlow wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servinglib.loaders.tensorflow.saved_model_files import saved_model_check


@pytest.fixture
def model(examples_model: Path, tmp_path: Path) -> Path:
    """A private copy of a TF 2 SavedModel with variables, free to damage."""
    return Path(shutil.copytree(examples_model, tmp_path / "1"))


def test_saved_models_written_by_tensorflow_are_complete(
    examples_model: Path, tf1_model: Path, keras_models: dict[str, object]
) -> None:
    """TF 2, TF 1 and Keras exports are complete as written."""
    for path in (examples_model, tf1_model, keras_models["export"]):
        assert saved_model_check(str(path)) is None


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda m: (m / "saved_model.pb").unlink(), "no saved_model.pb"),
        (lambda m: (m / "variables" / "variables.index").unlink(), "variables.index is missing"),
        (
            lambda m: _truncate(m / "variables" / "variables.index", 10),
            "not completely written",
        ),
        (
            lambda m: (m / "variables" / "variables.data-00000-of-00001").unlink(),
            "variables.data-00000-of-00001 is missing",
        ),
        (
            lambda m: _truncate(m / "variables" / "variables.data-00000-of-00001", 3),
            "variables.data-00000-of-00001 holds 3 of its",
        ),
        (lambda m: _rsync_in_progress(m / "variables"), "variables.index is missing"),
        (lambda m: _only_the_graph(m, keep_directory=True), "the graph has 2 variables"),
        (lambda m: _only_the_graph(m, keep_directory=False), "the graph has 2 variables"),
    ],
    ids=[
        "no-graph",
        "no-index",
        "short-index",
        "no-shard",
        "short-shard",
        "temp-files-only",
        "empty-variables-dir",
        "no-variables-dir",
    ],
)
def test_half_copied_saved_model_is_incomplete(model: Path, damage: object, reason: str) -> None:
    """Each way a copy can be caught half-way says what is missing."""
    damage(model)  # type: ignore[operator]
    found = saved_model_check(str(model))
    assert found is not None
    assert reason in found


def _rsync_in_progress(variables: Path) -> None:
    """Leaves only rsync's hidden temp file of the data shard, and no index yet."""
    (variables / "variables.index").unlink()
    (variables / "variables.data-00000-of-00001").rename(variables / ".variables.data.Xa9")


def _only_the_graph(model: Path, *, keep_directory: bool) -> None:
    """A writer that paused after saved_model.pb: nothing (or an empty directory) in variables/."""
    shutil.rmtree(model / "variables")
    if keep_directory:
        (model / "variables").mkdir()


def test_a_graph_without_variables_needs_no_index(tmp_path: Path) -> None:
    """A SavedModel whose graph declares no variable is complete with no variables/ at all."""
    import tensorflow as tf

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def double(self, x: tf.Tensor) -> tf.Tensor:
            return x * 2

    tf.saved_model.save(Doubler(), str(tmp_path / "1"))
    shutil.rmtree(tmp_path / "1" / "variables")
    assert saved_model_check(str(tmp_path / "1")) is None


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as file:
        file.truncate(size)


@pytest.mark.parametrize("variables", ["kept", "removed"])
def test_a_half_written_graph_file_is_incomplete(model: Path, variables: str) -> None:
    """saved_model.pb cut anywhere (a writer caught mid-file, or paused past the settle window)
    is incomplete, whether or not variables/ is already there: its last field runs past its end."""
    graph = model / "saved_model.pb"
    whole = graph.read_bytes()
    if variables == "removed":
        shutil.rmtree(model / "variables")
    for size in sorted({1, 2, len(whole) // 3, len(whole) // 2, len(whole) - 1}):
        graph.write_bytes(whole[:size])
        reason = saved_model_check(str(model))
        assert reason == "saved_model.pb is not completely written yet", size
    graph.write_bytes(whole)
    assert (saved_model_check(str(model)) is None) is (variables == "kept")
