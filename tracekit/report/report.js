// tracekit report: draws the plots from the embedded data, links each connection's time axes,
// sorts tables. window.tracekitStatus records what happened, for tests and for the curious.
(function () {
  "use strict";
  // plots: traces drawn per plot id; timings: [decode, draw] ms per plot; readyMs: when the
  // plots near the screen at load had painted; lastDrawnMs: when the latest plot was drawn.
  var status = { errors: [], plots: {}, timings: {}, expected: 0, ready: false, readyMs: null,
                 lastDrawnMs: null };
  status.startMs = performance.now();
  window.tracekitStatus = status;
  window.addEventListener("error", function (e) { status.errors.push(String(e.message)); });

  var data = JSON.parse(document.getElementById("tk-data").textContent);
  status.parsedMs = performance.now();
  var byId = {};
  data.plots.forEach(function (p) { byId[p.id] = p; });

  var ARRAYS = { u4: Uint32Array, i4: Int32Array, f4: Float32Array, f8: Float64Array };

  // base64 little-endian typed array -> Float64Array of base + value * scale.
  function decode(enc) {
    var bin = atob(enc.b64);
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var raw = new ARRAYS[enc.dtype](bytes.buffer);
    var out = new Float64Array(raw.length);
    for (var j = 0; j < raw.length; j++) out[j] = enc.base + raw[j] * enc.scale;
    return out;
  }

  // A segment is a vertical bar from y to y_end: two points and a gap (NaN) per segment.
  function bars(x, y, yEnd) {
    var n = x.length, bx = new Float64Array(3 * n), by = new Float64Array(3 * n);
    for (var i = 0; i < n; i++) {
      bx[3 * i] = x[i]; bx[3 * i + 1] = x[i]; bx[3 * i + 2] = NaN;
      by[3 * i] = y[i]; by[3 * i + 1] = yEnd[i]; by[3 * i + 2] = NaN;
    }
    return [bx, by];
  }

  function trace(t) {
    var x = decode(t.x), y = decode(t.y);
    var out = {
      name: t.name, type: t.gl ? "scattergl" : "scatter", x: x, y: y,
      visible: t.visible ? true : "legendonly", hoverlabel: { namelength: -1 },
    };
    var line = { color: t.color, width: t.width, dash: t.dash };
    if (t.kind === "segments") {
      var xy = bars(x, y, decode(t.y_end));
      // A tick at each end, as tcptrace draws them: a bar shorter than a pixel (one segment
      // on a long transfer's axis) still shows, and a burst reads as a column of ticks.
      out.x = xy[0]; out.y = xy[1]; out.mode = "lines+markers"; out.line = line;
      out.marker = { symbol: "line-ew", size: 6, color: t.color,
                     line: { color: t.color, width: Math.max(1, t.width - 0.5) } };
      out.connectgaps = false;
    } else if (t.kind === "step") {
      out.mode = "lines"; line.shape = "hv"; out.line = line;
    } else if (t.kind === "line") {
      out.mode = "lines"; out.line = line;
    } else {
      out.mode = "markers";
      out.marker = { color: t.color, symbol: t.symbol, size: 7, line: { color: t.color, width: 1.2 } };
    }
    return out;
  }

  function layout(p) {
    var shapes = p.shades.map(function (s) {
      return { type: "rect", xref: "x", yref: "paper", x0: s.x0, x1: s.x1, y0: 0, y1: 1,
               fillcolor: s.color, line: { width: 0 }, layer: "below" };
    });
    // Labels of neighbouring findings would overprint: stagger them down three rows.
    var notes = p.shades.map(function (s, i) {
      return { xref: "x", yref: "paper", x: s.x0, y: 1, xanchor: "left", yanchor: "top",
               yshift: -15 * (i % 3), text: s.label, showarrow: false,
               font: { size: 11, color: "#8a1c1c" }, bgcolor: "rgba(255,255,255,0.7)" };
    });
    return {
      // The mode bar stands upright in the right margin, clear of the legend across the top.
      margin: { l: 70, r: 40, t: 8, b: 44 },
      modebar: { orientation: "v", bgcolor: "rgba(255,255,255,0.8)", color: "#8a93a3" },
      paper_bgcolor: "#ffffff", plot_bgcolor: "#ffffff",
      font: { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12,
              color: "#1d2433" },
      xaxis: { title: { text: p.x_label }, gridcolor: "#eceff3", zeroline: false,
               showline: true, linecolor: "#c9ced8" },
      yaxis: { title: { text: p.y_label }, gridcolor: "#eceff3", zeroline: false,
               showline: true, linecolor: "#c9ced8", exponentformat: "SI" },
      legend: { orientation: "h", x: 0, xanchor: "left", y: 1.0, yanchor: "bottom",
                font: { size: 11 }, bgcolor: "rgba(255,255,255,0)" },
      hovermode: "closest", dragmode: "zoom", shapes: shapes, annotations: notes,
    };
  }

  // The glue's initial ranges: a connection's time span, a TSG's sequence span.
  function ranged(p, lay) {
    if (p.x_range) { lay.xaxis.range = p.x_range.slice(); lay.xaxis.autorange = false; }
    if (p.y_range) { lay.yaxis.range = p.y_range.slice(); lay.yaxis.autorange = false; }
    return lay;
  }

  var CONFIG = { responsive: true, displaylogo: false, scrollZoom: false,
                 modeBarButtonsToRemove: ["select2d", "lasso2d"] };

  // Zoom or pan on one plot moves every other plot of the same connection to the same times.
  var syncing = false;
  var zoomed = {};  // connection -> its current time range; null or absent: the full range
  function link(div, connection) {
    div.on("plotly_relayout", function (ev) {
      if (syncing) return;
      var update = null;
      if (ev["xaxis.range[0]"] !== undefined) {
        update = { "xaxis.range": [ev["xaxis.range[0]"], ev["xaxis.range[1]"]] };
      } else if (ev["xaxis.range"]) {
        update = { "xaxis.range": ev["xaxis.range"].slice() };
      } else if (ev["xaxis.autorange"]) {
        update = { "xaxis.autorange": true };
      }
      if (!update) return;
      zoomed[connection] = update["xaxis.range"] || null;
      var others = document.querySelectorAll("#conn-" + connection + " .plot.drawn");
      var pending = [];
      syncing = true;
      others.forEach(function (o) { if (o !== div) pending.push(Plotly.relayout(o, update)); });
      Promise.all(pending).then(function () { syncing = false; },
                                function () { syncing = false; });
    });
  }

  function draw(div) {
    var p = byId[div.id];
    if (!p || div.classList.contains("drawn")) return Promise.resolve();
    div.classList.add("drawn");
    var t0 = performance.now();
    var traces = p.traces.map(trace);
    var t1 = performance.now();
    var look = ranged(p, layout(p));
    // A plot drawn after its connection was zoomed opens on the same time range.
    if (zoomed[p.connection]) look.xaxis.range = zoomed[p.connection].slice();
    return Plotly.newPlot(div, traces, look, CONFIG).then(function () {
      status.plots[div.id] = div.data.length;
      status.timings[div.id] = [Math.round(t1 - t0), Math.round(performance.now() - t1)];
      status.lastDrawnMs = performance.now();
      link(div, p.connection);
    });
  }

  // WebGL contexts are few (browsers keep about 16): a closed section gives its plots back.
  function undraw(div) {
    if (!div.classList.contains("drawn")) return;
    Plotly.purge(div);
    div.classList.remove("drawn");
    delete status.plots[div.id];
  }

  // Plots draw one after another, and only once they come near the screen: the first screen is
  // ready sooner, and a long report holds WebGL contexts only for plots someone looked at.
  var queue = Promise.resolve();
  function enqueue(div) {
    queue = queue.then(function () { return draw(div); }).catch(function (err) {
      status.errors.push(String(err && err.message || err));
    });
    return queue;
  }

  var watcher = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (e.isIntersecting && e.target.closest("details").open) enqueue(e.target);
    });
  }, { rootMargin: "200px 0px" });
  document.querySelectorAll(".plot").forEach(function (div) { watcher.observe(div); });

  function nearScreen(div) {
    var r = div.getBoundingClientRect();
    return r.width > 0 && r.bottom > -200 && r.top < window.innerHeight + 200;
  }

  var sections = document.querySelectorAll("details.connection");
  sections.forEach(function (section) {
    section.addEventListener("toggle", function () {
      section.querySelectorAll(".plot").forEach(function (div) {
        if (!section.open) undraw(div);
        else if (nearScreen(div)) enqueue(div);
      });
    });
  });
  document.querySelectorAll("a[data-open]").forEach(function (a) {
    a.addEventListener("click", function () {
      var target = document.getElementById(a.getAttribute("data-open"));
      if (target) target.open = true;
    });
  });

  // Tables: click (or Enter on) a header to sort by it; again to reverse.
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("thead th");
    heads.forEach(function (th, col) {
      function sort() {
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        heads.forEach(function (h) { h.setAttribute("aria-sort", "none"); });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var ca = a.cells[col], cb = b.cells[col];
          var na = ca.getAttribute("data-n"), nb = cb.getAttribute("data-n");
          var c = na !== null && nb !== null ? parseFloat(na) - parseFloat(nb)
            : ca.textContent.localeCompare(cb.textContent, undefined, { numeric: true });
          return ascending ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") sort(); });
    });
  });

  var first = Array.prototype.filter.call(
    document.querySelectorAll("details.connection[open] .plot"), nearScreen);
  status.expected = first.length;
  first.forEach(enqueue);
  queue.then(function () {
    // Ready once the drawn plots are on screen: the first frame after newPlot paints them (the
    // WebGL ones can take long), and a callback of the frame after that runs only once it has.
    requestAnimationFrame(function () {
      requestAnimationFrame(function () {
        setTimeout(function () {
          status.readyMs = performance.now();
          status.ready = true;
          document.documentElement.setAttribute("data-ready", "true");
        }, 0);
      });
    });
  });
})();
