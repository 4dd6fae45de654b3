"""Tests for the model config: TF Serving's models.config files, validation, paths, round trips."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
from google.protobuf import text_format
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorflow_serving.config import model_server_config_pb2 as tfs_model_server_config_pb2

from servinglib.errors import InvalidArgumentError, NotFoundError, UnimplementedError
from servinglib.protos import model_pb2, model_server_config_pb2
from servinglib.server import (
    ModelConfig,
    ModelServerConfig,
    parse_model_server_config,
    read_model_server_config,
)
from servinglib.server import _config_support as config_support
from servinglib.server import config as config_module
from servinglib.server.logging_config import LoggingConfig
from servinglib.sources import ServableVersionPolicy

# -- model config files as TF Serving's guide writes them (g3doc/serving_config.md) ---------

DOCS_BASIC = """
model_config_list {
  config {
    name: 'my_first_model'
    base_path: '/tmp/my_first_model/'
    model_platform: 'tensorflow'
  }
  config {
    name: 'my_second_model'
    base_path: '/tmp/my_second_model/'
    model_platform: 'tensorflow'
  }
}
"""

DOCS_PIN_ONE_VERSION = """
model_config_list {
  config {
    name: 'my_model'
    base_path: '/models/my_model'
    model_platform: 'tensorflow'
    model_version_policy {
      specific {
        versions: 42
      }
    }
  }
}
"""

DOCS_CANARY_LABELS = """
model_config_list {
  config {
    name: 'my_model'
    base_path: '/models/my_model'
    model_platform: 'tensorflow'
    model_version_policy {
      specific {
        versions: 42
        versions: 43
      }
    }
    version_labels {
      key: 'stable'
      value: 42
    }
    version_labels {
      key: 'canary'
      value: 43
    }
  }
}
"""

DOCS_PROMOTED_LABELS = DOCS_CANARY_LABELS.replace("value: 42", "value: 43")

# Blog-post style: colons before messages, tabs, comments, latest N and all.
MIXED_POLICIES = """
# Three models, one per version policy.
model_config_list: {
\tconfig: {
\t\tname: "email_model",
\t\tbase_path: "/serving/email_model",
\t\tmodel_platform: "tensorflow",
\t\tmodel_version_policy: { latest: { num_versions: 2 } }
\t},
\tconfig: {
\t\tname: "scorer"
\t\tbase_path: "/serving/scorer"
\t\tmodel_platform: "python"
\t\tmodel_version_policy: { all: {} }
\t}
\tconfig: { name: "default_policy" base_path: "/serving/default" model_platform: "tensorflow" }
}
"""

LEGACY_MODEL_TYPE = """
model_config_list {
  config { name: "old" base_path: "/models/old" model_type: TENSORFLOW }
}
"""

WITH_LOGGING = """
model_config_list {
  config {
    name: "logged"
    base_path: "/models/logged"
    model_platform: "tensorflow"
    logging_config {
      log_collector_config { type: "" filename_prefix: "/tmp/logs" }
      sampling_config { sampling_rate: 0.1 }
    }
  }
}
"""

RELATIVE = """
model_config_list {
  config { name: "near" base_path: "models/near" model_platform: "tensorflow" }
  config { name: "far" base_path: "/srv/far" model_platform: "tensorflow" }
  config { name: "cloud" base_path: "gs://bucket/cloud" model_platform: "tensorflow" }
}
"""

TF_SERVING_FILES = {
    "docs-basic": DOCS_BASIC,
    "docs-pin-one-version": DOCS_PIN_ONE_VERSION,
    "docs-canary-labels": DOCS_CANARY_LABELS,
    "docs-promoted-labels": DOCS_PROMOTED_LABELS,
    "mixed-policies": MIXED_POLICIES,
    "legacy-model-type": LEGACY_MODEL_TYPE,
    "with-logging": WITH_LOGGING,
    "relative": RELATIVE,
}


@pytest.fixture(autouse=True)
def _fresh_one_time_warnings() -> Iterator[None]:
    """Each test sees the once-per-process warnings afresh."""
    config_support.warned.clear()
    yield
    config_support.warned.clear()


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == config_module.__name__ and record.levelno == logging.WARNING
    ]


def one_model(**fields: str) -> str:
    """A config text of one model with ``fields`` (text-format values) added to name and path."""
    body = " ".join(f"{key} {value}" for key, value in fields.items())
    return f'model_config_list {{ config {{ name: "m" base_path: "/m" {body} }} }}'


# -- reading TF Serving's files -------------------------------------------------------------


def test_docs_basic_example_parses_into_two_tensorflow_models() -> None:
    """The guide's first example gives two TensorFlow models serving their latest version."""
    config = parse_model_server_config(DOCS_BASIC)

    assert config == ModelServerConfig(
        (
            ModelConfig("my_first_model", "/tmp/my_first_model/"),
            ModelConfig("my_second_model", "/tmp/my_second_model/"),
        )
    )
    assert config.names == ("my_first_model", "my_second_model")


def test_docs_specific_version_pins_one_version() -> None:
    """A specific policy with one version serves exactly that version."""
    model = parse_model_server_config(DOCS_PIN_ONE_VERSION).model("my_model")

    assert model is not None
    assert model.version_policy == ServableVersionPolicy.specific([42])


def test_docs_canary_labels_map_labels_to_versions() -> None:
    """Two pinned versions with stable and canary labels read as a label → version mapping."""
    model = parse_model_server_config(DOCS_CANARY_LABELS).model("my_model")

    assert model is not None
    assert model.version_policy == ServableVersionPolicy.specific([42, 43])
    assert model.version_labels == {"stable": 42, "canary": 43}


def test_several_labels_may_point_at_one_version() -> None:
    """After promotion both labels name version 43, which is legal."""
    model = parse_model_server_config(DOCS_PROMOTED_LABELS).model("my_model")

    assert model is not None
    assert model.version_labels == {"stable": 43, "canary": 43}


def test_latest_n_all_and_default_policies() -> None:
    """latest { num_versions: 2 }, all {} and no policy (latest 1) parse, in any spelling."""
    config = parse_model_server_config(MIXED_POLICIES)

    assert [model.version_policy for model in config.models] == [
        ServableVersionPolicy.latest(2),
        ServableVersionPolicy.all(),
        ServableVersionPolicy.latest(1),
    ]
    assert [model.model_platform for model in config.models] == [
        "tensorflow",
        "python",
        "tensorflow",
    ]


@pytest.mark.parametrize("policy", ["{}", "{ latest {} }", "{ latest { num_versions: 0 } }"])
def test_empty_policy_or_latest_zero_means_latest_one(policy: str) -> None:
    """An empty policy and latest with num_versions 0 mean the latest version, as in TF Serving."""
    model = parse_model_server_config(one_model(model_version_policy=policy)).model("m")

    assert model is not None
    assert model.version_policy == ServableVersionPolicy.latest(1)


@pytest.mark.parametrize("name", TF_SERVING_FILES)
def test_tf_serving_parses_the_same_text_into_the_same_bytes(name: str) -> None:
    """TF Serving's own ModelServerConfig class parses each file into the bytes ours gives."""
    text = TF_SERVING_FILES[name]

    official = text_format.Parse(text, tfs_model_server_config_pb2.ModelServerConfig())
    ours = text_format.Parse(text, model_server_config_pb2.ModelServerConfig())

    assert ours.SerializeToString(deterministic=True) == official.SerializeToString(
        deterministic=True
    )
    assert ModelServerConfig.from_proto(official) == parse_model_server_config(text)


def test_canonical_text_gives_tf_servings_bytes() -> None:
    """A config written by to_text parses in TF Serving into the bytes of our to_proto."""
    config = ModelServerConfig(
        parse_model_server_config(DOCS_CANARY_LABELS).models
        + parse_model_server_config(MIXED_POLICIES).models
    )
    text = config.to_text()

    official = text_format.Parse(text, tfs_model_server_config_pb2.ModelServerConfig())

    assert official.SerializeToString(deterministic=True) == config.to_proto().SerializeToString(
        deterministic=True
    )


def test_legacy_model_type_tensorflow_means_the_tensorflow_platform(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """model_type: TENSORFLOW (deprecated) reads as model_platform "tensorflow", warned once."""
    with caplog.at_level(logging.WARNING):
        first = parse_model_server_config(LEGACY_MODEL_TYPE)
        parse_model_server_config(LEGACY_MODEL_TYPE)

    assert first == ModelServerConfig((ModelConfig("old", "/models/old", "tensorflow"),))
    assert "model_type" not in first.to_text()
    assert warnings_logged(caplog) == [
        'Model old: model_type is deprecated; use model_platform: "tensorflow"'
    ]


def test_model_type_given_as_a_number_is_read_too() -> None:
    """model_type: 1 is TENSORFLOW."""
    model = parse_model_server_config(one_model(model_type=": 1")).model("m")

    assert model is not None
    assert model.model_platform == "tensorflow"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"model_type": ": OTHER"},
            r"^Model m: model_type OTHER is not supported; set model_platform",
        ),
        ({"model_type": ": 7"}, r"^Model m: model_type 7 is not supported"),
        (
            {"model_type": ": TENSORFLOW", "model_platform": ': "tensorflow"'},
            r"^Model m: illegal setting both model_type \(deprecated\) and model_platform$",
        ),
    ],
)
def test_unsupported_model_types_are_rejected(fields: dict[str, str], message: str) -> None:
    """model_type other than TENSORFLOW, or beside model_platform, is INVALID_ARGUMENT."""
    with pytest.raises(InvalidArgumentError, match=message):
        parse_model_server_config(one_model(**fields))


def test_missing_model_platform_means_tensorflow() -> None:
    """A model naming no platform is a TensorFlow model, as ModelConfig's default."""
    model = parse_model_server_config(one_model()).model("m")

    assert model == ModelConfig("m", "/m")


def test_logging_config_is_kept_and_written_back() -> None:
    """A logging_config parses into the model's LoggingConfig and survives a text round trip."""
    config = parse_model_server_config(WITH_LOGGING)

    expected = LoggingConfig(sampling_rate=0.1, collector_type="", filename_prefix="/tmp/logs")
    assert config.model("logged") == ModelConfig(
        "logged", "/models/logged", logging_config=expected
    )
    assert parse_model_server_config(config.to_text()) == config


def test_an_invalid_logging_config_names_its_model() -> None:
    """A sampling rate above 1 is rejected as INVALID_ARGUMENT naming the model."""
    with pytest.raises(InvalidArgumentError, match="Model logged: sampling_rate"):
        parse_model_server_config(WITH_LOGGING.replace("0.1", "1.5"))


def test_empty_model_config_list_serves_no_models() -> None:
    """model_config_list {} is a valid config with no models."""
    assert parse_model_server_config("model_config_list {}") == ModelServerConfig()


# -- relative base paths --------------------------------------------------------------------


def test_relative_base_paths_join_base_dir_and_absolute_ones_stay() -> None:
    """With base_dir, a relative base path joins it; absolute paths and URIs are unchanged."""
    config = parse_model_server_config(RELATIVE, base_dir="/etc/serving")

    assert [model.base_path for model in config.models] == [
        "/etc/serving/models/near",
        "/srv/far",
        "gs://bucket/cloud",
    ]


def test_without_base_dir_relative_base_paths_stay_relative() -> None:
    """Without base_dir a relative base path is kept as written, for the server to resolve."""
    config = parse_model_server_config(RELATIVE)

    near = config.model("near")
    assert near is not None
    assert near.base_path == "models/near"
    assert near.base_path_is_relative
    assert not any(model.base_path_is_relative for model in config.models[1:])


def test_relative_base_dir_is_made_absolute_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative base_dir is resolved once, at parse time, against the working directory."""
    monkeypatch.chdir(tmp_path)

    config = parse_model_server_config(RELATIVE, base_dir="conf")

    near = config.model("near")
    assert near is not None
    assert near.base_path == str(tmp_path / "conf" / "models" / "near")


def test_read_resolves_relative_paths_against_the_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_model_server_config joins relative base paths to the config file's directory."""
    (tmp_path / "serving").mkdir()
    path = tmp_path / "serving" / "models.config"
    path.write_text(RELATIVE, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    config = read_model_server_config(os.path.relpath(path))

    assert [model.base_path for model in config.models] == [
        str(tmp_path / "serving" / "models" / "near"),
        "/srv/far",
        "gs://bucket/cloud",
    ]


def test_read_skips_a_byte_order_mark(tmp_path: Path) -> None:
    """A file an editor saved with a UTF-8 byte-order mark reads like one without."""
    path = tmp_path / "models.config"
    path.write_bytes(b"\xef\xbb\xbf" + DOCS_BASIC.encode())

    assert read_model_server_config(path) == parse_model_server_config(DOCS_BASIC)


def test_read_takes_an_explicit_base_dir(tmp_path: Path) -> None:
    """An explicit base_dir overrides the config file's directory."""
    path = tmp_path / "models.config"
    path.write_text(RELATIVE, encoding="utf-8")

    config = read_model_server_config(path, base_dir="/opt/models")

    assert config.models[0].base_path == "/opt/models/models/near"


def test_read_parses_content_already_read_without_opening_the_file(tmp_path: Path) -> None:
    """Given the bytes, read parses them: the file may have changed or gone since."""
    path = tmp_path / "models.config"  # never written

    config = read_model_server_config(path, content=RELATIVE.encode())

    assert config.models[0].base_path == str(tmp_path / "models" / "near")
    with pytest.raises(InvalidArgumentError, match=f"{path} is not UTF-8"):
        read_model_server_config(path, content=b"\xff")


def test_resolve_base_paths_on_a_python_config() -> None:
    """resolve_base_paths joins relative paths of a config built in Python."""
    config = ModelServerConfig((ModelConfig("a", "a"), ModelConfig("b", "/b")))

    resolved = config.resolve_base_paths("/root")

    assert [model.base_path for model in resolved.models] == ["/root/a", "/b"]
    assert resolved.models[1] is config.models[1]


# -- errors ---------------------------------------------------------------------------------


def test_read_missing_file_is_not_found_naming_it(tmp_path: Path) -> None:
    """A config file that does not exist is NOT_FOUND, with its path in the message."""
    path = tmp_path / "missing.config"

    with pytest.raises(NotFoundError, match=f"^The model config file {path} was not found$"):
        read_model_server_config(path)


def test_read_directory_or_non_utf8_file_is_invalid(tmp_path: Path) -> None:
    """A directory, or a file that is not UTF-8, is INVALID_ARGUMENT naming the path."""
    binary = tmp_path / "binary.config"
    binary.write_bytes(b"\xff\xfe model_config_list {}")

    with pytest.raises(
        InvalidArgumentError, match=f"^The model config file {tmp_path} is a directory"
    ):
        read_model_server_config(tmp_path)
    with pytest.raises(InvalidArgumentError, match="is not UTF-8 text"):
        read_model_server_config(binary)


def test_syntax_error_quotes_the_parser_with_line_and_column() -> None:
    """A syntax error is INVALID_ARGUMENT with the parser's message, line and column."""
    text = 'model_config_list {\n  config {\n    name "a"\n  }\n}\n'

    with pytest.raises(InvalidArgumentError) as raised:
        parse_model_server_config(text)

    assert raised.value.message == (
        'Invalid model server config: line 3, column 10: \'    name "a"\': Expected ":".'
    )


def test_read_syntax_error_names_the_file(tmp_path: Path) -> None:
    """An error in a file names the file before the parser's message."""
    path = tmp_path / "models.config"
    path.write_text("model_config_list {\n  config {\n", encoding="utf-8")

    with pytest.raises(InvalidArgumentError, match=f"^Invalid model server config in {path}: line"):
        read_model_server_config(path)


def test_unknown_field_is_invalid_argument_naming_it() -> None:
    """A misspelt field is INVALID_ARGUMENT naming the field and TF Serving's message type."""
    text = 'model_config_list {\n  config {\n    name: "a"\n    base_pth: "/a"\n  }\n}\n'

    with pytest.raises(InvalidArgumentError) as raised:
        parse_model_server_config(text)

    assert raised.value.message == (
        "Invalid model server config: line 4, column 5: "
        'Message type "ModelConfig" has no field named "base_pth".'
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (one_model(name=': "again"'), 'should not have multiple "name" fields'),
        (
            one_model(model_version_policy="{ latest {} all {} }"),
            'Field "all" is specified along with field "latest"',
        ),
        (one_model(model_platform=": tensorflow"), "Expected string"),
        (one_model(version_labels='{ key: "a" value: "one" }'), "Couldn't parse integer"),
        (
            one_model(model_version_policy="{ specific { versions: 99999999999999999999 } }"),
            "Value out of range",
        ),
    ],
)
def test_text_format_mistakes_are_invalid_argument(text: str, fragment: str) -> None:
    """Repeated fields, two policies, unquoted strings and bad numbers are INVALID_ARGUMENT."""
    with pytest.raises(
        InvalidArgumentError, match=r"^Invalid model server config: line 1"
    ) as raised:
        parse_model_server_config(text)

    assert fragment in raised.value.message


@pytest.mark.parametrize("text", ["", "  \n", "# model_config_list {}\n"])
def test_empty_text_is_invalid_not_a_config_without_models(text: str) -> None:
    """A text that sets nothing (an empty or truncated file) is INVALID_ARGUMENT."""
    with pytest.raises(
        InvalidArgumentError, match=r"sets no model_config_list .*model_config_list \{\}"
    ):
        parse_model_server_config(text)


def test_every_cut_of_a_file_is_invalid_or_the_whole_config() -> None:
    """A half-written file fails to parse wherever it is cut, unless it lost only a comment."""
    text = DOCS_CANARY_LABELS + "\n# a trailing comment\n"
    whole = parse_model_server_config(text)
    end_of_config = text.rindex("}") + 1

    for cut in range(len(text)):
        if cut >= end_of_config:
            assert parse_model_server_config(text[:cut]) == whole
            continue
        with pytest.raises(InvalidArgumentError):
            parse_model_server_config(text[:cut])


def test_custom_model_config_is_unimplemented() -> None:
    """custom_model_config is UNIMPLEMENTED, saying only model_config_list is served."""
    text = 'custom_model_config { type_url: "type.googleapis.com/x.Y" value: "" }'

    with pytest.raises(UnimplementedError, match=r"^custom_model_config is not supported"):
        parse_model_server_config(text)


def test_duplicate_model_names_are_rejected_with_tf_servings_message() -> None:
    """A name listed twice is INVALID_ARGUMENT with TF Serving's message, from text or Python."""
    message = "^Illegal to list model a multiple times in config list$"
    text = (
        'model_config_list { config { name: "a" base_path: "/1" } '
        'config { name: "a" base_path: "/2" } }'
    )

    with pytest.raises(InvalidArgumentError, match=message):
        parse_model_server_config(text)
    with pytest.raises(InvalidArgumentError, match=message):
        ModelServerConfig((ModelConfig("a", "/1"), ModelConfig("a", "/2")))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ModelConfig("", "/p"), "^A model name must not be empty$"),
        (lambda: ModelConfig("a/b", "/p"), "^Model name 'a/b' must not contain '/'$"),
        (lambda: ModelConfig("m", ""), "^Model m has an empty base_path$"),
        (lambda: ModelConfig("m", "/p", ""), "^Model m has an empty model_platform$"),
        (
            lambda: ModelConfig("m", "/p", version_labels={"": 1}),
            "^Model m: invalid version label '': a label is non-empty and contains neither "
            "'/' nor ':'$",
        ),
        (
            lambda: ModelConfig("m", "/p", version_labels={"a/b": 1}),
            "^Model m: invalid version label 'a/b'",
        ),
        (
            lambda: ModelConfig("m", "/p", version_labels={"a:b": 1}),
            "^Model m: invalid version label 'a:b'",
        ),
        (
            lambda: ModelConfig("m", "/p", version_labels={"stable": -1}),
            "^Model m: version label 'stable' points at version -1; a version is an int64 >= 0$",
        ),
        (
            lambda: ModelConfig("m", "/p", version_labels={"stable": 2**63}),
            "points at version 9223372036854775808",
        ),
        (
            lambda: ModelConfig("m", "/p", version_policy=ServableVersionPolicy.latest(2**32)),
            "^Model m: num_versions 4294967296 does not fit in uint32$",
        ),
        (
            lambda: ModelConfig("m", "/p", version_policy=ServableVersionPolicy.specific([2**63])),
            r"^Model m: versions \[9223372036854775808\] do not fit in int64$",
        ),
    ],
)
def test_invalid_model_configs_are_invalid_argument(
    make: Callable[[], object], message: str
) -> None:
    """Each rule of ModelConfig fails with INVALID_ARGUMENT and a message naming the model."""
    with pytest.raises(InvalidArgumentError, match=message):
        make()


@pytest.mark.parametrize(
    "make",
    [
        lambda: ModelConfig(1, "/p"),
        lambda: ModelConfig("m", "/p", version_labels={"stable": True}),
        lambda: ModelConfig("m", "/p", version_labels={"stable": "1"}),
        lambda: ModelConfig("m", "/p", version_policy="latest"),
        lambda: ModelServerConfig(("not a model",)),
    ],
)
def test_wrong_python_types_are_type_errors(make: Callable[[], object]) -> None:
    """Values of the wrong Python type are TypeError, not a config error."""
    with pytest.raises(TypeError):
        make()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"version_labels": '{ key: "a:b" value: 1 }'}, "^Model m: invalid version label 'a:b'"),
        (
            {"version_labels": '{ key: "s" value: -2 }'},
            "^Model m: version label 's' points at version -2;",
        ),
        (
            {"model_version_policy": "{ specific {} }"},
            "^Model m: specific version policy needs at least one version$",
        ),
        (
            {"model_version_policy": "{ specific { versions: -1 } }"},
            r"^Model m: versions must be >= 0, got \[-1\]$",
        ),
    ],
)
def test_invalid_values_in_a_file_name_the_model(fields: dict[str, str], message: str) -> None:
    """Bad labels and policies in a file are INVALID_ARGUMENT naming the model."""
    with pytest.raises(InvalidArgumentError, match=message):
        parse_model_server_config(one_model(**fields))


def test_an_invalid_file_names_the_file_in_semantic_errors(tmp_path: Path) -> None:
    """A valid-syntax file with an invalid value names the file and the model."""
    path = tmp_path / "models.config"
    path.write_text(one_model(version_labels='{ key: "" value: 1 }'), encoding="utf-8")

    with pytest.raises(
        InvalidArgumentError, match=f"^Invalid model server config in {path}: Model m: invalid"
    ):
        read_model_server_config(path)


# -- the Python objects ----------------------------------------------------------------------


def test_model_config_defaults_to_tensorflow_latest_no_labels() -> None:
    """ModelConfig(name, base_path) is a TensorFlow model serving its latest version."""
    model = ModelConfig("m", "/models/m")

    assert model.model_platform == "tensorflow"
    assert model.version_policy == ServableVersionPolicy.latest()
    assert model.version_labels == {}


def test_named_constructors_and_path_like_base_paths() -> None:
    """tensorflow() and python() pick the platform; a pathlib.Path base path becomes a str."""
    assert ModelConfig.tensorflow("t", "/t") == ModelConfig("t", "/t", "tensorflow")
    assert ModelConfig.python("p", Path("/p")) == ModelConfig("p", "/p", "python")
    assert isinstance(ModelConfig("m", Path("/m")).base_path, str)


def test_version_labels_are_a_frozen_copy() -> None:
    """version_labels is read-only and does not follow later changes of the caller's dict."""
    labels = {"stable": 1}
    model = ModelConfig("m", "/p", version_labels=labels)
    labels["canary"] = 2

    assert dict(model.version_labels) == {"stable": 1}
    with pytest.raises(TypeError):
        model.version_labels["canary"] = 2
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        model.name = "other"


def test_configs_are_hashable_values() -> None:
    """Equal configs (labels in any order) are equal and hash alike."""
    first = ModelConfig("m", "/p", version_labels={"a": 1, "b": 2})
    second = ModelConfig("m", "/p", version_labels={"b": 2, "a": 1})

    assert first == second
    assert hash(first) == hash(second)
    assert hash(ModelServerConfig((first,))) == hash(ModelServerConfig([second]))
    assert first != ModelConfig("m", "/p", version_labels={"a": 1})


def test_model_lookup_names_and_edits() -> None:
    """model() finds by name, names keeps order, with_model/without_model return new configs."""
    a, b = ModelConfig("a", "/a"), ModelConfig("b", "/b")
    config = ModelServerConfig((a, b))
    new_a = ModelConfig("a", "/new", "python")

    assert config.model("b") is b
    assert config.model("c") is None
    assert config.names == ("a", "b")
    assert config.with_model(new_a).models == (new_a, b)
    assert config.with_model(ModelConfig("c", "/c")).names == ("a", "b", "c")
    assert config.without_model("a").models == (b,)
    assert config.without_model("missing") is config
    assert config.models == (a, b)


def test_evolve_revalidates() -> None:
    """attrs.evolve builds a new, validated config (as a server resolving paths does)."""
    model = ModelConfig("m", "relative")

    assert attrs.evolve(model, base_path="/abs").base_path == "/abs"
    with pytest.raises(InvalidArgumentError):
        attrs.evolve(model, base_path="")


# -- protos ----------------------------------------------------------------------------------


def test_to_proto_and_from_proto_round_trip() -> None:
    """A config survives to_proto/from_proto, every policy and labels included."""
    config = ModelServerConfig(
        (
            ModelConfig("a", "/a", "tensorflow", ServableVersionPolicy.latest(3), {"x": 1}),
            ModelConfig("b", "/b", "python", ServableVersionPolicy.all()),
            ModelConfig("c", "/c", "tensorflow", ServableVersionPolicy.specific([5, 1])),
        )
    )

    message = config.to_proto()

    assert ModelServerConfig.from_proto(message) == config
    assert list(message.model_config_list.config[2].model_version_policy.specific.versions) == [
        1,
        5,
    ]


def test_empty_config_to_proto_sets_the_list() -> None:
    """An empty config is an empty model_config_list (serve nothing), not an unset config."""
    message = ModelServerConfig().to_proto()

    assert message.WhichOneof("config") == "model_config_list"
    assert parse_model_server_config(ModelServerConfig().to_text()) == ModelServerConfig()


def test_from_proto_accepts_tf_servings_messages() -> None:
    """TF Serving's own ModelServerConfig and ModelConfig messages convert too."""
    official = tfs_model_server_config_pb2.ModelServerConfig()
    model = official.model_config_list.config.add(name="m", base_path="rel")
    model.version_labels["stable"] = 3

    config = ModelServerConfig.from_proto(official, base_dir="/root")

    assert config == ModelServerConfig(
        (ModelConfig("m", "/root/rel", version_labels={"stable": 3}),)
    )
    assert ModelConfig.from_proto(model) == ModelConfig("m", "rel", version_labels={"stable": 3})


def test_from_proto_rejects_other_messages_and_unset_configs() -> None:
    """Another message type is a TypeError; a message with no config set is INVALID_ARGUMENT."""
    with pytest.raises(TypeError, match="expected a ModelServerConfig message, got ModelSpec"):
        ModelServerConfig.from_proto(model_pb2.ModelSpec())
    with pytest.raises(InvalidArgumentError, match="sets no model_config_list"):
        ModelServerConfig.from_proto(model_server_config_pb2.ModelServerConfig())


# -- property tests: Python → text → Python ------------------------------------------------

names = st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s)
labels = st.text(min_size=1, max_size=10).filter(lambda s: "/" not in s and ":" not in s)
versions = st.integers(min_value=0, max_value=2**63 - 1)
policies = st.one_of(
    st.builds(ServableVersionPolicy.latest, st.integers(min_value=1, max_value=2**32 - 1)),
    st.just(ServableVersionPolicy.all()),
    st.builds(ServableVersionPolicy.specific, st.frozensets(versions, min_size=1, max_size=4)),
)
models = st.builds(
    ModelConfig,
    name=names,
    base_path=st.text(min_size=1, max_size=30).filter(lambda s: "\0" not in s),
    model_platform=st.text(min_size=1, max_size=10),
    version_policy=policies,
    version_labels=st.dictionaries(labels, versions, max_size=3),
)
configs = st.lists(models, max_size=4, unique_by=lambda model: model.name).map(ModelServerConfig)


@settings(max_examples=200, deadline=None)
@given(configs)
def test_python_to_text_to_python_round_trips(config: ModelServerConfig) -> None:
    """Any config written with to_text parses back into an equal config."""
    assert parse_model_server_config(config.to_text()) == config


@settings(max_examples=100, deadline=None)
@given(configs)
def test_tf_serving_reads_our_text_as_our_proto(config: ModelServerConfig) -> None:
    """TF Serving's class parses our to_text into the bytes of our to_proto, and back again."""
    official = text_format.Parse(config.to_text(), tfs_model_server_config_pb2.ModelServerConfig())

    assert official.SerializeToString(deterministic=True) == config.to_proto().SerializeToString(
        deterministic=True
    )
    assert ModelServerConfig.from_proto(official) == config


# -- import weight ---------------------------------------------------------------------------


def test_importing_the_config_module_loads_no_protobuf() -> None:
    """servinglib.server.config imports protobuf only when a config is parsed or converted."""
    probe = (
        "import json, sys\nimport servinglib.server.config\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('google.protobuf'))))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )

    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == []


@pytest.mark.parametrize(
    ("base_path", "fragment"),
    [
        ("/models/m\0", "contains a NUL byte"),
        ("/models/" + "p" * 256, "too long"),
        ("/models" + "/p" * 2100, "too long"),
        ("s3://bucket/" + "k" * 5000, "too long"),
    ],
)
def test_base_paths_no_file_system_takes_are_invalid(base_path: str, fragment: str) -> None:
    """A NUL byte, or a path past PATH_MAX or a local name past NAME_MAX, is INVALID_ARGUMENT."""
    with pytest.raises(InvalidArgumentError, match=fragment) as caught:
        ModelConfig.tensorflow("m", base_path)
    assert len(caught.value.message) < 600
    assert ModelConfig.tensorflow("m", "s3://bucket/" + "k" * 300).base_path.endswith("k")
