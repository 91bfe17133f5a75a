"""The report's plots as static images (PNG or SVG) for a paper or a slide.

The images are the page's own figures: the report is rendered, opened in headless Chromium
(tracekit.report.chromium), each plot is drawn as the page draws it and plotly.js's
`Plotly.toImage` exports it at a fixed size. So an image shows exactly what the report shows,
with the same thinning budget, colours and legend.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from tracekit.core.atomic import replacing
from tracekit.errors import TracekitError
from tracekit.report import chromium
from tracekit.report.html import Budget, write
from tracekit.report.model import ConnectionView, Encoded, Report

FORMATS = ("png", "svg")

# A paper column at print resolution: 1000 x 600 CSS pixels, PNG at twice that.
WIDTH_PX = 1000
HEIGHT_PX = 600
PNG_SCALE = 2

# The names the images are written under (refuse_overwriting checks the folder for them).
IMAGE_NAME = re.compile(r"(conn\d+_(a2b|b2a)|udp\d+|overview)_[a-z0-9_]+\.(png|svg)")

# A plot's kind, in file names, by its title's start (build.py's titles).
_KINDS = (
    ("Time-sequence graph, sender", "tsg"),
    ("Time-sequence graph, receiver", "tsg_receiver"),
    ("Throughput", "throughput"),
    ("Round-trip time", "rtt"),
    ("Flight size", "flight"),
    ("Departures and arrivals", "merged"),
    ("One-way delay", "delay"),
    ("Arrival time against datagram number", "arrivals"),
)

_CONNECTION = re.compile(r"Connection (\d+): .* (->|<-) ")
_UDP = re.compile(r"UDP stream (\d+)")

READY = "window.tracekitStatus && window.tracekitStatus.ready"

# Opens every section in turn, brings each plot on screen at the image's size so the page draws
# it, and exports it (the page draws in SVG: an SVG holds every trace as paths, not a raster). A
# section closed at load is closed again, giving its plots back.
_EXPORT_JS = """
(async function (formats, width, height, pngScale, wanted) {
  var status = window.tracekitStatus, out = {};
  function sleep(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }
  var sections = document.querySelectorAll("details.connection");
  for (var s = 0; s < sections.length; s++) {
    var section = sections[s], wasOpen = section.open;
    section.open = true;
    var divs = section.querySelectorAll(".plot");
    for (var d = 0; d < divs.length; d++) {
      var div = divs[d];
      if (wanted.indexOf(div.id) < 0) continue;
      // Drawn at the image's size: the page sizes bars' outlines and ticks in its pixels.
      div.style.width = width + "px";
      div.style.height = height + "px";
      if (div.classList.contains("plotted")) await Plotly.Plots.resize(div);
      div.scrollIntoView({ block: "center" });
      var t0 = performance.now();
      while (!div.classList.contains("plotted")) {
        if (performance.now() - t0 > 60000) throw new Error(div.id + ": not drawn in 60 s");
        await sleep(20);
        await status.idle();
      }
      await status.idle();
      var data = div.data.map(function (t) { return Object.assign({}, t); });
      var layout = Object.assign({}, div.layout, { width: width, height: height });
      out[div.id] = {};
      for (var f = 0; f < formats.length; f++) {
        out[div.id][formats[f]] = await Plotly.toImage(
          { data: data, layout: layout, config: { staticPlot: true } },
          { format: formats[f], width: width, height: height,
            scale: formats[f] === "png" ? pngScale : 1 });
      }
    }
    if (!wasOpen) section.open = false;
  }
  if (status.errors.length) throw new Error(status.errors.join("; "));
  return out;
})
"""


@dataclass(frozen=True)
class Image:
    """One plot of the report, as it is exported: the page's element id and the file's stem."""

    plot_id: str
    stem: str
    kind: str


def images(report: Report) -> list[Image]:
    """Every drawn plot of the report and the name of its image, in the page's order.

    A connection's plot is `conn<N>_<a2b|b2a>_<kind>` (N as `tracekit flows` numbers it, the
    direction drawn), a UDP stream's `udp<N>_<kind>`, the stacked throughput of all drawn
    connections `overview_throughput`.
    """
    out = []
    if report.overview_plot is not None:
        out.append(Image("plot-overview", "overview_throughput", "throughput"))
    for ci, view in enumerate(report.connections):
        prefix = _prefix(view, ci)
        seen: set[str] = set()
        for pi, plot in enumerate(view.plots):
            sides = [("sender", plot)]
            pair = view.receiver_plots[pi] if pi < len(view.receiver_plots) else None
            if pair is not None:
                sides.append(("receiver", pair))
            for side, chart in sides:
                # A deferred plot is built here for its title: images are drawn from plots
                # built beforehand (`build_report`).
                title = chart.shell.title if isinstance(chart, Encoded) else chart.drawn().title
                kind = next((k for start, k in _KINDS if title.startswith(start)), None)
                if kind is None or kind in seen:
                    kind = f"plot{pi}_{side}"
                seen.add(kind)
                out.append(Image(f"plot-{ci}-{pi}-{side}", f"{prefix}_{kind}", kind))
    return out


def _prefix(view: ConnectionView, index: int) -> str:
    if m := _CONNECTION.match(view.title):
        return f"conn{m.group(1)}_{'a2b' if m.group(2) == '->' else 'b2a'}"
    if m := _UDP.match(view.title):
        return f"udp{m.group(1)}"
    return f"conn{index}_a2b"


def export(
    report: Report,
    folders: dict[str, Path],
    budget: Budget | None = None,
    timeout_s: float = 300,
    kinds: Collection[str] | None = None,
) -> list[Path]:
    """Write each drawn plot of `report` as an image into `folders[fmt]` (fmt: png or svg),
    only the plots of `kinds` (file-name kinds: tsg, tsg_receiver, throughput, ...) when given;
    return the files written. Raises TracekitError without Chromium."""
    if not chromium.chromium_available():
        raise TracekitError(
            f"{chromium.CHROMIUM}: not found: static images are drawn in headless Chromium; "
            "install it (Debian: apt-get install chromium)"
        )
    wanted = [i for i in images(report) if kinds is None or i.kind in kinds]
    if not wanted:
        return []
    formats = [f for f in FORMATS if f in folders]
    with tempfile.TemporaryDirectory(prefix="tracekit-figures-") as tmp:
        page = write(report, Path(tmp) / "report.html", budget or Budget())
        call = (
            f"{_EXPORT_JS}({json.dumps(formats)}, {WIDTH_PX}, {HEIGHT_PX}, {PNG_SCALE}, "
            f"{json.dumps([i.plot_id for i in wanted])})"
        )
        with chromium.Browser(width=1400, height=900) as browser:
            result = browser.open(page, READY, call, timeout=timeout_s, scale=0.1)
    if result.exceptions:
        raise RuntimeError(f"the report's page failed: {result.exceptions[0]}")
    drawn: dict[str, dict[str, str]] = result.value or {}
    written = []
    for image in wanted:
        for fmt in formats:
            url = drawn.get(image.plot_id, {}).get(fmt)
            if url is None:
                raise RuntimeError(f"{image.plot_id}: no {fmt} image came back from the page")
            target = folders[fmt] / f"{image.stem}.{fmt}"
            with replacing(target) as part:
                part.write_bytes(_data_url_bytes(url))
            written.append(target)
    return written


def _data_url_bytes(url: str) -> bytes:
    """The bytes of a data: URL, base64 (PNG) or percent-encoded (plotly's SVG)."""
    head, _, body = url.partition(",")
    if head.endswith(";base64"):
        return base64.b64decode(body)
    return urllib.parse.unquote_to_bytes(body)
