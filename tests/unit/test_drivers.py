"""The driver/toolkit table (docs/stack-facts.md section 1) and the helpers over it."""

from __future__ import annotations

import pytest
from packaging.version import Version

from sm120kit import drivers as drv

# docs/stack-facts.md section 1, NVIDIA's table for Linux x86_64, pinned verbatim.
FACTS_MIN_DRIVER = {
    "12.8.0": "570.26",
    "12.8.1": "570.124.06",
    "12.9.0": "575.51.03",
    "12.9.1": "575.57.08",
    "13.0.0": "580.65.06",
    "13.0.1": "580.82.07",
    "13.0.2": "580.95.05",
    "13.1.0": "590.44.01",
    "13.1.1": "590.48.01",
    "13.2.0": "595.45.04",
    "13.2.1": "595.58.03",
    "13.2.2": "595.71.05",
}


def test_table_pins_facts() -> None:
    assert dict(drv.TOOLKIT_MIN_DRIVER) == FACTS_MIN_DRIVER
    assert drv.known_toolkits() == list(FACTS_MIN_DRIVER)  # ascending
    for toolkit, minimum in FACTS_MIN_DRIVER.items():
        assert drv.min_driver(toolkit) == minimum


def test_constants_pin_facts() -> None:
    assert drv.SM120_MIN_DRIVER == "570.26"
    assert drv.SM120_MIN_TOOLKIT == "12.8.0"
    assert drv.DEFAULT_MIRROR == "https://developer.download.nvidia.com/compute/cuda"
    # 13.x needs >= 580: every 13.x minimum is an R580-or-newer driver.
    for toolkit, minimum in FACTS_MIN_DRIVER.items():
        if toolkit.startswith("13."):
            assert Version(minimum) >= Version("580")


def test_table_is_ascending_in_both_columns() -> None:
    toolkits = [Version(t) for t in drv.TOOLKIT_MIN_DRIVER]
    minimums = [drv.parse_driver_version(d) for d in drv.TOOLKIT_MIN_DRIVER.values()]
    assert toolkits == sorted(toolkits)
    assert minimums == sorted(minimums)


@pytest.mark.parametrize(
    "lower, higher",
    [
        ("570.26", "570.86.10"),
        ("570.86.10", "570.124.06"),
        ("570.124.06", "575.51.03"),
        ("470.82.01", "550.54.15"),
        ("569.99", "570.26"),
        ("580.95.05", "580.95.6"),
        ("580.82.07", "580.95.05"),
    ],
)
def test_driver_versions_compare_numerically(lower: str, higher: str) -> None:
    assert drv.parse_driver_version(lower) < drv.parse_driver_version(higher)


def test_driver_version_leading_zero_is_numeric() -> None:
    assert drv.parse_driver_version("580.95.05") == drv.parse_driver_version("580.95.5")


@pytest.mark.parametrize("bad", ["", "abc", "v570", "570.86.10rc1", "570..1", "N/A", None])
def test_parse_driver_version_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="not a driver version"):
        drv.parse_driver_version(bad)


def test_format_driver_restores_nvidia_spelling() -> None:
    for text in ("580.95.05", "570.26", "570.124.06", "470.82.01", "590.48.01"):
        assert drv.format_driver(drv.parse_driver_version(text)) == text


def test_parse_driver_version_strips_whitespace() -> None:
    assert drv.parse_driver_version(" 580.95.05\n") == Version("580.95.05")


@pytest.mark.parametrize(
    "driver, newest",
    [
        ("560.35.03", None),
        ("570.26", "12.8.0"),
        ("570.86.10", "12.8.0"),
        ("570.124.06", "12.8.1"),
        ("575.51.02", "12.8.1"),
        ("575.51.03", "12.9.0"),
        ("575.57.08", "12.9.1"),
        ("580.65.05", "12.9.1"),
        ("580.65.06", "13.0.0"),
        ("580.82.07", "13.0.1"),
        ("580.95.05", "13.0.2"),
        ("590.44.01", "13.1.0"),
        ("590.48.01", "13.1.1"),
        ("595.45.04", "13.2.0"),
        ("595.58.03", "13.2.1"),
        ("595.71.05", "13.2.2"),
        ("610.0", "13.2.2"),
    ],
)
def test_newest_toolkit_for(driver: str, newest: str | None) -> None:
    assert drv.newest_toolkit_for(driver) == newest


def test_newest_toolkit_for_within_major_minor() -> None:
    assert drv.newest_toolkit_for("580.95.05", "12.8") == "12.8.1"
    assert drv.newest_toolkit_for("570.86.10", "12.8") == "12.8.0"
    assert drv.newest_toolkit_for("570.86.10", "12.9") is None
    assert drv.newest_toolkit_for("590.48.01", "13.0") == "13.0.2"


def test_toolkit_can_run() -> None:
    # The example of the issue: 570.86.10 cannot take 12.8 Update 1.
    assert drv.toolkit_can_run("12.8.0", "570.86.10")
    assert not drv.toolkit_can_run("12.8.1", "570.86.10")
    assert drv.toolkit_can_run("12.8.1", "570.124.06")
    assert not drv.toolkit_can_run("13.0.0", "575.57.08")


def test_supports_sm120() -> None:
    assert drv.supports_sm120("570.26")
    assert drv.supports_sm120("580.95.05")
    for old in ("569.99", "570.25", "560.35.03", "550.54.15", "470.82.01"):
        assert not drv.supports_sm120(old)


def test_unknown_toolkits_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown CUDA toolkit 12\.6\.3.*SM120 needs >= 12\.8"):
        drv.min_driver("12.6.3")
    with pytest.raises(ValueError, match="not a CUDA toolkit version"):
        drv.min_driver("twelve")


def test_major_minor_spelling_means_ga() -> None:
    assert drv.canonical_toolkit("12.8") == "12.8.0"
    assert drv.min_driver("13.0") == "580.65.06"


@pytest.mark.parametrize(
    "toolkit, ceiling",
    [
        ("12.8.0", 14),
        ("12.8.1", 14),
        ("12.9.1", 14),
        ("13.0.2", 15),
        ("13.1.1", 15),
        ("13.2.0", 15),
    ],
)
def test_gcc_ceiling(toolkit: str, ceiling: int) -> None:
    assert drv.gcc_max(toolkit) == ceiling


def test_runfile_names_pin_facts() -> None:
    assert drv.runfile_name("12.8.0") == "cuda_12.8.0_570.86.10_linux.run"
    assert drv.runfile_name("12.8.1") == "cuda_12.8.1_570.124.06_linux.run"
    assert drv.runfile_name("12.9.1") == "cuda_12.9.1_575.57.08_linux.run"
    assert drv.runfile_name("13.0.2") == "cuda_13.0.2_580.95.05_linux.run"
    assert drv.runfile_name("13.1.1") == "cuda_13.1.1_590.48.01_linux.run"
    # Not in docs/stack-facts.md section 1: recipes must name these runfiles themselves.
    assert drv.runfile_name("13.0.0") is None


def test_runfile_url_layout() -> None:
    name = "cuda_13.0.2_580.95.05_linux.run"
    assert drv.runfile_url("13.0.2", name) == (
        "https://developer.download.nvidia.com/compute/cuda/13.0.2/local_installers/" + name
    )
    assert drv.runfile_url("13.0.2", name, "http://mirror.lan/cuda/") == (
        "http://mirror.lan/cuda/13.0.2/local_installers/" + name
    )


def test_pip_route_is_cuda13_only() -> None:
    assert drv.pip_packages("13.0.2") == [
        "nvidia-cuda-nvcc==13.0.*",
        "nvidia-cuda-runtime==13.0.*",
        "nvidia-cuda-cccl==13.0.*",
    ]
    with pytest.raises(ValueError, match="no pip route"):
        drv.pip_packages("12.8.1")


def test_apt_packages() -> None:
    assert drv.apt_packages("12.8.1") == [
        "cuda-nvcc-12-8",
        "cuda-cudart-dev-12-8",
        "cuda-cccl-12-8",
    ]


def test_major_and_major_minor() -> None:
    assert drv.cuda_major("13.0.2") == 13
    assert drv.cuda_major_minor("12.8.1") == "12.8"
    assert drv.cuda_major_minor("13") == "13.0"


@pytest.mark.parametrize(
    ("text", "xy", "major"),
    [("13.0.2", "13.0", 13), ("12.8", "12.8", 12), ("13", "13.0", 13), ("12.9.1", "12.9", 12)],
)
def test_cuda_version_cuts_x_y_once(text: str, xy: str, major: int) -> None:
    v = drv.CudaVersion.parse(text)
    assert (v.xy, v.major, str(v)) == (xy, major, text)
    assert drv.cuda_major_minor(text) == xy and drv.cuda_major(text) == major
    assert drv.CudaVersion.from_cu("cu" + xy.replace(".", "")).xy == xy
