"""servinglib-server's flags: TF Serving's names, syntax and defaults; knobs; clear refusals."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from servinglib.server.cli import FlagError, ServerFlags, parse_flags
from servinglib.server.cli.flags import make_parser
from servinglib.server.cli.model_server import core_options, stream_limits
from servinglib.server.plane.stream_limits import StreamLimits
from servinglib.sources.remote_mirror import default_cache_dir


def test_tf_servings_defaults() -> None:
    """Unset flags take tensorflow_model_server's defaults (gRPC 8500, REST off, ...)."""
    flags = parse_flags(["--model_base_path=/models/m"], environ={})
    assert (flags.port, flags.rest_api_port, flags.model_name) == (8500, 0, "default")
    assert flags.file_system_poll_wait_seconds == 1.0
    assert flags.rest_api_timeout_in_ms == 30_000
    assert (flags.max_num_load_retries, flags.load_retry_interval_micros) == (5, 60_000_000)
    assert flags.enable_model_warmup
    assert not flags.enable_batching


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--enable_batching"], True),
        (["--enable_batching=true"], True),
        (["--enable_batching=false"], False),
        (["--enable_batching", "false"], False),
        (["--enable_batching=0"], False),
    ],
)
def test_boolean_flags_take_tf_serving_syntax(args: list[str], expected: bool) -> None:
    """A boolean flag alone means true; =true/=false and a following word also work."""
    flags = parse_flags(["--model_base_path=/m", *args], environ={})
    assert flags.enable_batching is expected


def test_values_with_equals_or_space() -> None:
    """--flag=value and --flag value both parse."""
    flags = parse_flags(["--model_base_path", "/m", "--rest_api_port=8501", "--port", "9000"], {})
    assert (flags.model_base_path, flags.rest_api_port, flags.port) == ("/m", 8501, 9000)


def test_docker_environment_defaults() -> None:
    """MODEL_NAME and MODEL_BASE_PATH work as in TF Serving's Docker image."""
    flags = parse_flags([], environ={"MODEL_BASE_PATH": "/models", "MODEL_NAME": "resnet"})
    assert (flags.model_name, flags.model_base_path) == ("resnet", "/models/resnet")
    flags = parse_flags(["--model_name=m"], environ={"MODEL_BASE_PATH": "/models"})
    assert flags.model_base_path == "/models/m"


def test_tuning_knobs_are_accepted_and_listed() -> None:
    """TF Serving's C++ tuning knobs parse and are reported as ignored."""
    flags = parse_flags(
        ["--model_base_path=/m", "--rest_api_num_threads=16", "--enable_profiler=false"], {}
    )
    assert flags.ignored == ("rest_api_num_threads", "enable_profiler")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "No models to serve"),
        (["--model_base_path=/m", "--use_alts_credentials"], "--use_alts_credentials is not"),
        (["--model_base_path=/m", "--batching_parameters_file=b.txt"], "needs --enable_batching"),
        (["--model_base_path=/m", "--port=8501", "--rest_api_port=8501"], "must differ"),
        (["--model_base_path=/m", "--log_level=LOUD"], "--log_level"),
    ],
)
def test_flags_that_cannot_be_served_are_refused(args: list[str], message: str) -> None:
    """Missing models, unsupported and clashing flags raise FlagError saying which."""
    with pytest.raises(FlagError, match=message):
        parse_flags(args, environ={})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port=abc"], "--port: expected an integer, got 'abc'"),
        (["--rest_api_port=70000"], "--rest_api_port: a port is 0..65535, got 70000"),
        (["--file_system_poll_wait_seconds=soon"], "--file_system_poll_wait_seconds: expected a"),
        (["--enable_batching=maybe"], "--enable_batching: expected true or false, got 'maybe'"),
    ],
)
def test_malformed_values_name_the_flag_as_typed(args: list[str], message: str) -> None:
    """A value of the wrong type is one FlagError line naming the flag as the user wrote it."""
    with pytest.raises(FlagError) as caught:
        parse_flags(["--model_base_path=/m", *args], environ={})
    assert str(caught.value) == message or str(caught.value).startswith(message)
    assert "invalid" not in str(caught.value)


@pytest.mark.parametrize(
    ("typed", "closest"),
    [
        ("--model_base_pth=/m", "--model_base_path"),
        ("--enable_batchin", "--enable_batching"),
        ("--rest_port=8501", "--rest_api_port"),
        ("-port=8500", "--port"),
    ],
)
def test_a_mistyped_flag_names_the_closest_one(typed: str, closest: str) -> None:
    """An unknown flag is refused in one line that names it and the closest known flag."""
    with pytest.raises(FlagError) as caught:
        parse_flags(["--model_base_path=/m", typed], environ={})
    assert str(caught.value) == f"unknown flag {typed.partition('=')[0]} (did you mean {closest}?)"


def test_a_flag_like_no_other_gets_no_suggestion() -> None:
    """An unknown flag close to none is refused without a guess."""
    with pytest.raises(FlagError, match=r"^unknown flag --zzz$"):
        parse_flags(["--model_base_path=/m", "--zzz=1"], environ={})


def test_help_shows_defaults_as_tf_serving_does() -> None:
    """--help writes each default as TF Serving's help does: --port=8500, --name="", bools."""
    text = make_parser().format_help()
    for shown in (
        "--port=8500 ",
        "--rest_api_port=0 ",
        '--model_name="default" ',
        '--model_base_path="" ',
        "--enable_batching=false ",
        "--enable_model_warmup=true ",
        "--file_system_poll_wait_seconds=1 ",
        "--max_requests_in_flight_per_model=0 ",
    ):
        assert shown in text, shown
    assert "()" not in text
    assert len(text.split("Serve TensorFlow")[0].splitlines()) <= 2  # a short usage line


def test_zero_means_no_limit_where_the_default_is_none() -> None:
    """--max_requests_in_flight_per_model=0 and the memory limit 0 mean no bound, as unset."""
    flags = parse_flags(
        ["--model_base_path=/m", "--max_requests_in_flight_per_model=0"], environ={}
    )
    assert flags.max_requests_in_flight_per_model is None
    assert flags.total_model_memory_limit_bytes is None
    flags = parse_flags(["--model_base_path=/m", "--max_requests_in_flight_per_model=4"], {})
    assert flags.max_requests_in_flight_per_model == 4


def test_request_log_bounds_have_defaults_and_reach_the_request_log() -> None:
    """The request log's byte and file bounds default to 256 MiB, 100 files, 1 GiB, and are set."""
    from servinglib.server.cli.model_server import request_log_options
    from servinglib.server.observe.log_sink import FileRetention
    from servinglib.server.observe.request_logger import RequestLogOptions

    defaults = request_log_options(parse_flags(["--model_base_path=/m"], environ={}))
    assert defaults == RequestLogOptions()
    assert (defaults.max_queued_bytes, defaults.file_retention) == (
        256 << 20,
        FileRetention(max_files=100, max_total_bytes=1 << 30),
    )
    flags = parse_flags(
        [
            "--model_base_path=/m",
            "--request_log_max_queued_bytes=1000",
            "--request_log_max_files=3",
            "--request_log_max_total_bytes=5000",
        ],
        environ={},
    )
    assert request_log_options(flags) == RequestLogOptions(
        max_queued_bytes=1000, file_retention=FileRetention(max_files=3, max_total_bytes=5000)
    )
    with pytest.raises(FlagError, match="request_log_max_files"):
        parse_flags(["--model_base_path=/m", "--request_log_max_files=0"], environ={})


def test_help_lists_tf_flags_and_ours_but_not_the_knobs() -> None:
    """--help shows TF Serving's flags and servinglib's own; ignored knobs stay hidden."""
    text = make_parser().format_help()
    for flag in ("--rest_api_port", "--model_config_file", "--enable_batching", "--demo"):
        assert flag in text
    assert "--rest_api_num_threads" not in text


def test_defaults_object_matches_the_parser() -> None:
    """ServerFlags() holds the same defaults the parser applies."""
    parsed = parse_flags(["--demo"], environ={})
    assert parsed == ServerFlags(demo=True)


def test_demo_allows_python_code_only_for_the_bundled_models() -> None:
    """--demo runs the bundled model.py, but not the python models of a config file beside it."""
    from servinglib.server.cli.model_server import core_options

    demo = core_options(parse_flags(["--demo"], environ={}))
    assert demo.platform_configs["python"].allow_code_execution
    mixed = core_options(parse_flags(["--demo", "--model_base_path=/m"], environ={}))
    assert not mixed.platform_configs["python"].allow_code_execution


def test_the_python_platforms_refusal_names_a_flag_the_cli_takes() -> None:
    """The python platform's refusal quotes a flag that parses and allows python models."""
    from servinglib.core import ServableData, ServableId
    from servinglib.loaders import PythonPlatformConfig
    from servinglib.loaders.python import make_adapter

    refused = make_adapter(PythonPlatformConfig()).adapt(
        "m", [ServableData.of(ServableId("m", 1), "/m/1")]
    )
    error = refused[0].error
    assert error is not None
    flag = re.search(r"servinglib-server: (--\w+)", str(error))
    assert flag is not None, str(error)
    assert parse_flags(
        ["--model_base_path=/m", flag.group(1)], environ={}
    ).allow_python_code_execution


def test_relative_paths_are_resolved_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative --model_base_path or --model_config_file means one under the working directory."""
    from servinglib.server.cli.model_server import model_config

    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "models.config").write_text(
        'model_config_list { config { name: "c" base_path: "m" model_platform: "python" } }'
    )
    monkeypatch.chdir(tmp_path)
    served = model_config(parse_flags(["--model_base_path=models/m"], environ={}))
    assert served.models[0].base_path == str(tmp_path / "models" / "m")
    served = model_config(parse_flags(["--model_config_file=models/models.config"], environ={}))
    assert served.models[0].base_path == str(tmp_path / "models" / "m")
    uri = model_config(  # the platform given: a guess would list the (unreachable) bucket
        parse_flags(["--model_base_path=gs://bucket/m", "--model_platform=python"], environ={})
    )
    assert uri.models[0].base_path == "gs://bucket/m"


def _parser_flags() -> set[str]:
    """Every flag --help shows: each ServerFlags field and --version."""
    names = {field.name for field in attrs.fields(ServerFlags)} - {"ignored"}
    return {f"--{name}" for name in names} | {"--version"}


def test_help_shows_every_flag_with_its_default() -> None:
    """--help lists every flag the parser takes, each valued one as --name=default."""
    text = make_parser().format_help()
    for field in attrs.fields(ServerFlags):
        if field.name == "ignored":
            continue
        assert re.search(rf"--{field.name}=\S", text), field.name
    assert "--version " in text


def test_the_cli_guide_lists_every_flag() -> None:
    """docs/guides/cli.md's flag tables name every flag the parser has, and no other."""
    guide = Path(__file__).parents[3] / "docs" / "guides" / "cli.md"
    listed = {
        flag
        for line in guide.read_text().splitlines()
        if line.startswith("| `--")
        for flag in re.findall(r"`(--\w+)`", line.split(" | ")[0])
    }
    assert listed == _parser_flags()


def test_help_shows_the_model_cache_dirs_real_default() -> None:
    """--model_cache_dir's help names the directory used when it is not given, not ""."""
    text = make_parser().format_help()
    assert re.search(rf'--model_cache_dir="{re.escape(default_cache_dir())}"\s', text)
    assert parse_flags(["--model_base_path=/m"], environ={}).model_cache_dir == ""  # unset


def test_the_stream_flags_set_the_planes_stream_limits() -> None:
    """--max_streams_per_model, --stream_max_buffered_bytes and --stream_idle_timeout_seconds
    become the DataPlane's StreamLimits; the defaults are StreamLimits' own."""
    flags = parse_flags(
        [
            "--demo",
            "--max_streams_per_model=3",
            "--stream_max_buffered_bytes=1000",
            "--stream_idle_timeout_seconds=2.5",
        ]
    )
    assert stream_limits(flags) == StreamLimits(
        max_streams_per_model=3, max_buffered_bytes=1000, idle_timeout_s=2.5
    )
    assert stream_limits(parse_flags(["--demo"])) == StreamLimits()
    with pytest.raises(FlagError, match="stream_idle_timeout_seconds"):
        parse_flags(["--demo", "--stream_idle_timeout_seconds=0"])


def test_the_repository_flags_parse_as_triton_s() -> None:
    """--model_repository alone serves; --load_model repeats; the mode defaults to none."""
    flags = parse_flags(["--model_repository=/models"], environ={})
    assert (flags.model_repository, flags.model_control_mode) == ("/models", "none")
    assert flags.repository_poll_secs == 15
    explicit = parse_flags(
        [
            "--model_repository=/models",
            "--model_control_mode=explicit",
            "--load_model=a",
            "--load_model=b",
        ],
        environ={},
    )
    assert explicit.load_model == ("a", "b")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--model_base_path=/m", "--model_control_mode=poll"], "need --model_repository"),
        (["--model_repository=/r", "--load_model=a"], "needs --model_control_mode=explicit"),
        (
            [
                "--model_repository=/r",
                "--model_control_mode=explicit",
                "--load_model=*",
                "--load_model=a",
            ],
            "give it alone",
        ),
        (
            ["--model_repository=/r", "--model_control_mode=explicit", "--num_workers=2"],
            "--num_workers",
        ),
        (["--model_repository=/r", "--model_control_mode=sometimes"], "model_control_mode"),
        (["--model_repository=/r", "--repository_poll_secs=0"], "repository_poll_secs"),
    ],
)
def test_repository_flags_that_cannot_be_served_are_one_line(argv: list[str], words: str) -> None:
    """Each combination Triton refuses or we cannot serve fails naming the flag."""
    with pytest.raises(FlagError, match=re.escape(words)):
        parse_flags(argv, environ={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1000000", 1_000_000),
        ("512MiB", 512 << 20),
        ("2GB", 2_000_000_000),
        ("1.5g", 1_500_000_000),
        ("64 kib", 64 << 10),
        ("0", None),
    ],
)
def test_the_model_memory_budget_takes_units_and_reaches_the_core(
    text: str, expected: int | None
) -> None:
    """--model_memory_budget reads decimal and binary units; 0 is no budget."""
    flags = parse_flags(["--demo", f"--model_memory_budget={text}"], environ={})
    assert core_options(flags).total_model_memory_limit_bytes == expected


@pytest.mark.parametrize("text", ["lots", "5XB", "-1GB", "1e9", "9" * 100])
def test_a_model_memory_budget_that_is_no_size_is_refused_naming_the_flag(text: str) -> None:
    """A budget without a number, or with an unknown unit, fails naming the flag."""
    with pytest.raises(FlagError, match="model_memory_budget"):
        parse_flags(["--demo", f"--model_memory_budget={text}"], environ={})


def test_load_model_pins_models_of_a_server_loading_on_demand() -> None:
    """--load_models_on_demand with --load_model (no repository needed) pins those models."""
    flags = parse_flags(
        ["--demo", "--load_models_on_demand", "--load_model=a", "--load_model=b"], environ={}
    )
    options = core_options(flags)
    assert options.load_models_on_demand
    assert options.pinned_models == {"a", "b"}


def test_the_two_spellings_of_the_budget_must_agree() -> None:
    """--model_memory_budget and --total_model_memory_limit_bytes are one budget."""
    with pytest.raises(FlagError, match="one budget"):
        parse_flags(
            ["--demo", "--model_memory_budget=1GB", "--total_model_memory_limit_bytes=5"],
            environ={},
        )
