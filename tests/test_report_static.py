"""`tracekit report --png/--svg`: each drawn plot as an image; the page's dark and print styles."""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.browser import Browser, png_pixels
from tracekit.report import chromium

ROOT = Path(__file__).resolve().parent.parent
SENDER = ROOT / "fixtures/captures/slow_start_overrun/sender.pcap"
KINDS = ("tsg", "throughput", "rtt", "flight")
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    if not chromium.chromium_available():
        pytest.skip("needs Chromium (/usr/bin/chromium)")
    out = tmp_path_factory.mktemp("figures")
    result = CliRunner().invoke(
        cli, ["report", str(SENDER), "--png", str(out / "png"), "--svg", str(out / "svg")]
    )
    return out, result


@pytest.mark.browser
def test_png_writes_one_valid_image_per_drawn_plot(exported: tuple[Path, Any]) -> None:
    out, result = exported
    assert result.exit_code == 0, result.output
    assert "png: 4 png images" in result.output
    names = sorted(p.name for p in (out / "png").iterdir())
    assert names == sorted(f"conn0_a2b_{k}.png" for k in KINDS)
    for path in (out / "png").iterdir():
        png = path.read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n", path.name
        assert png[12:16] == b"IHDR"
        # A paper column at twice the scale: 1000 x 600 CSS pixels.
        assert struct.unpack(">II", png[16:24]) == (2000, 1200), path.name


@pytest.mark.browser
def test_the_tsg_png_is_drawn_not_blank(exported: tuple[Path, Any]) -> None:
    out, _ = exported
    width, height, rgb = png_pixels((out / "png" / "conn0_a2b_tsg.png").read_bytes())
    assert (width, height) == (2000, 1200)
    pixels = [rgb[i : i + 3] for i in range(0, len(rgb), 3 * 97)]  # a sample, cheap to count
    inked = sum(1 for p in pixels if max(p) < 200)
    # The data line, the ACK line, the axes: a few per cent of the image, not all of it.
    assert 0.01 < inked / len(pixels) < 0.6
    assert len(set(pixels)) > 20  # the legend's colours, the traces' and the shading


@pytest.mark.browser
def test_svg_parses_and_holds_every_trace_as_paths(exported: tuple[Path, Any]) -> None:
    out, result = exported
    assert "svg: 4 svg images" in result.output
    names = sorted(p.name for p in (out / "svg").iterdir())
    assert names == sorted(f"conn0_a2b_{k}.svg" for k in KINDS)
    root = ET.parse(out / "svg" / "conn0_a2b_tsg.svg").getroot()
    assert root.tag == f"{SVG}svg"
    assert (root.get("width"), root.get("height")) == ("1000", "600")
    # Every trace is vector: no raster image in the figure.
    assert not list(root.iter(f"{SVG}image"))
    traces = [g for g in root.iter(f"{SVG}g") if "trace" in (g.get("class") or "").split()]
    assert len(traces) >= 5  # data, retransmitted, ACK line, window edge, SACK, ...
    lines = [
        p.get("d") or ""
        for g in traces
        for p in g.iter(f"{SVG}path")
        if {"js-line", "js-fill"} & set((p.get("class") or "").split())
    ]
    # The data segments alone are thousands of bars: a long path, not an empty one.
    assert max(len(d) for d in lines) > 10_000
    # Drawn at the image's size: a bar's end tick (its outline's second piece) is 6 pixels wide
    # in the image, as on the page.
    fills = [d for d in lines if d.startswith("M") and d.count("M") > 100]
    tick = fills[0].split("M")[2].split("L")[:2]
    (x0, _), (x1, _) = (map(float, point.strip("Z").split(",")) for point in tick)
    assert abs(abs(x1 - x0) - 6) < 0.5, tick


@pytest.mark.browser
def test_selection_limits_the_images_and_writes_only_images(
    exported: tuple[Path, Any], tmp_path: Path
) -> None:
    args = ["report", str(SENDER), "--connection", "0", "--from", "0.2", "--to", "0.5"]
    result = CliRunner().invoke(cli, [*args, "--svg", str(tmp_path / "svg")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "svg").iterdir()) == sorted(
        f"conn0_a2b_{k}.svg" for k in KINDS
    )
    assert not list(tmp_path.glob("*.html"))
    # The window, drawn on the capture's own time axis: its time ticks lie within it, the whole
    # transfer's (2.8 s) run past it.
    windowed = _time_ticks(tmp_path / "svg" / "conn0_a2b_tsg.svg")
    whole = _time_ticks(exported[0] / "svg" / "conn0_a2b_tsg.svg")
    assert len(windowed) >= 3 and min(windowed) >= 0.2 and max(windowed) <= 0.5, windowed
    assert max(whole) > 1.0, whole


def _time_ticks(svg: Path) -> list[float]:
    """The values of the x axis's tick labels in a plot exported as SVG."""
    root = ET.parse(svg).getroot()
    return [
        float(text.text or "nan")
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "xtick"
        for text in g.iter(f"{SVG}text")
    ]


def test_without_chromium_images_are_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chromium, "CHROMIUM", str(tmp_path / "no-chromium"))
    result = CliRunner().invoke(cli, ["report", str(SENDER), "--png", str(tmp_path / "png")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "no-chromium: not found" in result.output
    assert not (tmp_path / "png").exists()


def test_report_needs_an_output(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(SENDER)])
    assert result.exit_code == 2
    assert "-o FILE, --png DIR or --svg DIR" in result.output


def test_an_image_folder_holding_an_input_under_an_image_name_is_refused(tmp_path: Path) -> None:
    # A capture named as an image would be written over: refused before any work.
    capture = tmp_path / "conn0_a2b_tsg.png"
    capture.write_bytes(SENDER.read_bytes())
    result = CliRunner().invoke(cli, ["report", str(capture), "--png", str(tmp_path)])
    assert result.exit_code == 2
    assert "is an input file" in result.output
    assert capture.read_bytes() == SENDER.read_bytes()


def _background(browser: Browser, page: Path, scheme: str) -> tuple[list[int], tuple[int, ...]]:
    """The page's background colour as CSS computes it, and a painted pixel of its margin."""
    result = browser.open(
        page,
        "window.tracekitStatus && window.tracekitStatus.ready",
        "getComputedStyle(document.documentElement).backgroundColor",
        scale=0.25,
        color_scheme=scheme,
    )
    rgb = [int(v) for v in result.value.split("(")[1].split(")")[0].split(",")[:3]]
    _, _, pixels = png_pixels(result.screenshot_png)
    corner = tuple(pixels[0:3])
    return rgb, corner


@pytest.mark.browser
def test_the_page_follows_a_dark_colour_scheme(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", str(SENDER), "-o", str(page)])
    assert result.exit_code == 0, result.output
    with Browser(width=800, height=600) as browser:
        dark, dark_pixel = _background(browser, page, "dark")
        light, light_pixel = _background(browser, page, "light")
        plot_paper = browser.open(
            page,
            "window.tracekitStatus && window.tracekitStatus.ready",
            "getComputedStyle(document.querySelector('figure.chart')).backgroundColor",
            scale=0.1,
            color_scheme="dark",
        ).value
    assert max(dark) < 60 and max(dark_pixel) < 60, (dark, dark_pixel)
    assert min(light) > 200 and min(light_pixel) > 200, (light, light_pixel)
    # The plots keep their light paper, so their dark ink stays readable.
    assert plot_paper == "rgb(255, 255, 255)"


PRINTED = """JSON.stringify({
  modebar: Array.from(document.querySelectorAll(".modebar-container"),
                      m => getComputedStyle(m).display),
  closed: Array.from(document.querySelectorAll("details.finding:not([open]) .finding-body"),
                     b => b.getBoundingClientRect().height),
  whole: Array.from(document.querySelectorAll("figure.chart"),
                    f => getComputedStyle(f).breakInside),
  paper: getComputedStyle(document.documentElement).backgroundColor,
})"""


@pytest.mark.browser
def test_print_style_hides_the_toolbar_opens_sections_and_keeps_plots_whole(
    tmp_path: Path,
) -> None:
    page = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", str(SENDER), "-o", str(page)])
    assert result.exit_code == 0, result.output
    # Printed, closed sections open and push the plots down: a viewport tall enough that they
    # are all on screen, so all draw.
    with Browser(width=1000, height=8000) as browser:
        printed = json.loads(
            browser.open(
                page,
                "window.tracekitStatus && window.tracekitStatus.ready",
                PRINTED,
                scale=0.1,
                media="print",
                color_scheme="dark",
            ).value
        )
    assert printed["modebar"] and set(printed["modebar"]) == {"none"}
    # Closed findings print expanded.
    assert printed["closed"] and min(printed["closed"]) > 0
    assert printed["whole"] and set(printed["whole"]) == {"avoid"}
    # Light paper even when the screen is dark.
    assert printed["paper"] == "rgb(255, 255, 255)"


@pytest.mark.browser
def test_tsg_plot_draws_the_window_of_the_chosen_connection(tmp_path: Path) -> None:
    if not chromium.chromium_available():
        pytest.skip("needs Chromium (/usr/bin/chromium)")
    receiver = SENDER.with_name("receiver.pcap")
    args = ["tsg", str(SENDER), "--receiver", str(receiver), "--connection", "0"]
    args += ["--from", "0.2", "--to", "0.5", "--export", str(tmp_path), "--plot", "svg"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    images = sorted(p.name for p in tmp_path.glob("*.svg"))
    assert images == ["conn0_a2b_tsg.svg", "conn0_a2b_tsg_receiver.svg"]
    for name in images:
        root = ET.parse(tmp_path / name).getroot()
        ticks = [
            float(t.text)
            for g in root.iter(f"{SVG}g")
            if g.get("class") == "xtick"
            for t in g.iter(f"{SVG}text")
            if t.text
        ]
        # The time axis is the window asked for, not the transfer's 2.5 s.
        assert ticks and min(ticks) >= 0.2 and max(ticks) <= 0.5, (name, ticks)
        assert max(ticks) - min(ticks) >= 0.2, (name, ticks)
    # The series files are written beside the images, as without --plot.
    assert (tmp_path / "conn0_a2b_segments.csv").is_file()


def test_tsg_plot_without_chromium_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chromium, "CHROMIUM", str(tmp_path / "no-chromium"))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["tsg", str(SENDER), "--export", str(out), "--plot", "png"])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "no-chromium: not found" in result.output
    assert not out.exists()
