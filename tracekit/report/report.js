// tracekit report: draws the plots from the embedded data, thins each view to its budget, links
// each connection's time axes, zooms to a finding when it is clicked, sorts tables.
// window.tracekitStatus records what happened, for tests and for the curious.
(function () {
  "use strict";
  // plots: traces drawn per plot id; timings: [decode, draw] ms of each plot's first drawing;
  // paintedMs: when each plot was first on screen; views: what each plot's current view drew;
  // readyMs: when the plots near the screen at load had painted; lastDrawnMs: the latest draw;
  // segmentStride: the points of one bar of a segments trace (set below).
  var status = { errors: [], plots: {}, timings: {}, paintedMs: {}, views: {}, expected: 0,
                 ready: false, readyMs: null, lastDrawnMs: null };
  status.startMs = performance.now();
  window.tracekitStatus = status;
  window.addEventListener("error", function (e) { status.errors.push(String(e.message)); });

  // plotly.js was started from the top of the page (html.py): the browser compiles it off the
  // main thread while the parser reads on and this script decodes the first plots' points.
  // Every drawing waits for it (the queue below starts with it).
  var plotlyReady = window.tracekitPlotly.then(function (ms) { status.plotlyMs = ms; });

  var data = JSON.parse(document.getElementById("tk-data").textContent);
  status.parsedMs = performance.now();
  var BUDGET = data.budget;
  var byId = {};
  data.plots.forEach(function (p) { byId[p.id] = p; });

  // ---- decoding: base64 -> inflate -> unshuffle -> typed array -> Float64Array ----------------

  var ARRAYS = { u4: Uint32Array, i4: Int32Array, f4: Float32Array, f8: Float64Array };
  var SIZES = { u4: 4, i4: 4, f4: 4, f8: 8 };

  function base64Bytes(text) {
    if (Uint8Array.fromBase64) return Uint8Array.fromBase64(text);
    var bin = atob(text), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  }

  // The bytes go straight into the stream's writer: a Blob of them would copy them first, which
  // costs more than the inflating itself when a page holds hundreds of small columns.
  function inflate(bytes) {
    var stream = new DecompressionStream("deflate"), writer = stream.writable.getWriter();
    writer.write(bytes).catch(function () {});  // a failure rejects the read below too
    writer.close().catch(function () {});
    return new Response(stream.readable).arrayBuffer();
  }

  // The data blocks after the scripts (every point of a trace that has an opening level) are
  // there once the parser has read them.
  var parsed = document.readyState === "loading"
    ? new Promise(function (r) { document.addEventListener("DOMContentLoaded", r); })
    : Promise.resolve();

  function columnText(enc) {
    if (enc.b64 !== undefined) return Promise.resolve(enc.b64);
    return parsed.then(function () { return document.getElementById(enc.el).textContent; });
  }

  // A column as the page carries it: value = base + v * scale, v the running sum of zigzag
  // deltas when `delta` (sorted times and sequence numbers step by small amounts). Its bytes
  // are shuffled a piece of `enc.piece` values at a time: the piece's first bytes, then its
  // second bytes, and so on.
  function decodeColumn(enc) {
    return columnText(enc).then(function (text) {
      return inflate(base64Bytes(text));
    }).then(function (buffer) {
      var size = SIZES[enc.dtype], n = enc.n, b = new Uint8Array(buffer);
      var out = new Float64Array(n), base = enc.base, scale = enc.scale, i, start, m, at;
      var piece = enc.piece || n || 1;
      if (enc.delta) {
        // u4 zigzag deltas, the four byte planes of a piece read side by side (the common, big
        // case).
        var acc = 0;
        for (start = 0; start < n; start += piece) {
          m = Math.min(piece, n - start);
          at = start * 4;
          var m2 = at + 2 * m, m3 = at + 3 * m, m1 = at + m;
          for (i = 0; i < m; i++) {
            var z = (b[at + i] | (b[m1 + i] << 8) | (b[m2 + i] << 16) | (b[m3 + i] << 24)) >>> 0;
            acc += (z & 1) ? -(z + 1) / 2 : z / 2;
            out[start + i] = base + acc * scale;
          }
        }
        return out;
      }
      var bytes = new Uint8Array(n * size);
      for (start = 0; start < n; start += piece) {
        m = Math.min(piece, n - start);
        at = start * size;
        for (var k = 0; k < size; k++) {
          var from = at + k * m;
          for (i = 0; i < m; i++) bytes[at + i * size + k] = b[from + i];
        }
      }
      var raw = new ARRAYS[enc.dtype](bytes.buffer);
      for (i = 0; i < n; i++) out[i] = base + raw[i] * scale;
      return out;
    });
  }

  // A trace's points (x, y, a bar's top, kept indices, frames) from the columns `ref` names.
  function points(p, cols, ref) {
    var names = ["x", "y", "y_end", "keep", "frame"];
    return Promise.all(names.map(function (k) {
      var i = ref[k];
      if (i === null || i === undefined) return null;
      if (!cols[i]) cols[i] = decodeColumn(p.columns[i]);
      return cols[i];
    })).then(function (a) {
      var y = a[1], yEnd = a[2];
      if (yEnd && p.columns[ref.y_end].plus_other) {
        var top = new Float64Array(y.length);
        for (var i = 0; i < y.length; i++) top[i] = y[i] + yEnd[i];
        yEnd = top;
      }
      return { x: a[0], y: y, yEnd: yEnd, keep: a[3], frame: a[4] };
    });
  }

  // A plot's traces as arrays sorted by time, decoded once, when first needed: each trace's
  // opening level (or, without one, all its points) when the plot first draws; all the points
  // of the traces that have a level only once a view needs them (`whole`).
  var prepared = {};
  function prepare(p, whole) {
    var prep = prepared[p.id];
    if (!prep) {
      var cols = {}, t0 = performance.now();
      prep = prepared[p.id] = { cols: cols, whole: null, decodeMs: 0 };
      prep.opening = Promise.all(p.traces.map(function (t) {
        return points(p, cols, t.level || t).then(function (pts) {
          return { meta: t, level: t.level ? pts : null, all: t.level ? null : pts };
        });
      })).then(function (traces) {
        prep.traces = traces;
        prep.decodeMs = performance.now() - t0;
        return prep;
      });
    }
    if (!whole) return prep.opening;
    if (!prep.whole) {
      prep.whole = prep.opening.then(function () {
        var t0 = performance.now();
        return Promise.all(prep.traces.map(function (tr) {
          if (tr.all) return null;
          return points(p, prep.cols, tr.meta).then(function (pts) { tr.all = pts; });
        })).then(function () { prep.decodeMs += performance.now() - t0; return prep; });
      });
    }
    return prep.whole;
  }

  // The points a view of [x0, x1] draws from: a trace's level when the view holds the whole
  // trace (the level keeps its first and last point), else all its points.
  function source(tr, x0, x1) {
    var lv = tr.level;
    if (lv && (lv.x.length === 0 || (x0 <= lv.x[0] && lv.x[lv.x.length - 1] <= x1))) return lv;
    return tr.all;
  }
  function needsWhole(prep, x0, x1) {
    return prep.traces.some(function (tr) { return source(tr, x0, x1) === null; });
  }

  // ---- thinning a view: every point in it up to the budget, else M4 ------------------------

  function lowerBound(xs, v) {  // first index with xs[i] >= v
    var lo = 0, hi = xs.length;
    while (lo < hi) { var mid = (lo + hi) >>> 1; if (xs[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function upperBound(xs, v) {  // first index with xs[i] > v
    var lo = 0, hi = xs.length;
    while (lo < hi) { var mid = (lo + hi) >>> 1; if (xs[mid] <= v) lo = mid + 1; else hi = mid; }
    return lo;
  }

  // M4 (Jugel et al., VLDB 2014): per bucket of x, the first, last, lowest and highest point.
  // `ids` lists the candidate indices (sorted), or null for every index in [lo, hi).
  function m4(tr, ids, lo, hi, x0, x1, buckets) {
    var xs = tr.x, lows = tr.y, tops = tr.yEnd || tr.y;
    var span = x1 - x0, scale = span > 0 ? buckets / span : 0;
    var picked = [], current = -1, first = -1, last = -1, lowAt = -1, topAt = -1;
    var n = ids ? ids.length : hi - lo;
    function flush() {
      if (current < 0) return;
      picked.push(first, last);
      if (lowAt >= 0) picked.push(lowAt);
      if (topAt >= 0) picked.push(topAt);
    }
    for (var k = 0; k < n; k++) {
      var i = ids ? ids[k] : lo + k;
      var b = span > 0 ? Math.min(buckets - 1, Math.max(0, Math.floor((xs[i] - x0) * scale))) : 0;
      if (b !== current) { flush(); current = b; first = i; lowAt = topAt = -1; }
      last = i;
      var v = lows[i];
      if (v === v && (lowAt < 0 || v < lows[lowAt])) lowAt = i;
      v = tops[i];
      if (v === v && (topAt < 0 || v > tops[topAt])) topAt = i;
    }
    flush();
    picked.sort(function (a, b) { return a - b; });
    var out = [];
    for (var j = 0; j < picked.length; j++) if (j === 0 || picked[j] !== picked[j - 1]) out.push(picked[j]);
    return out;
  }

  // At most `target` of the candidates: all of them when they fit, else M4 with buckets made
  // finer (never coarser) while that fills less than half the target.
  function thin(tr, ids, lo, hi, x0, x1, target) {
    var n = ids ? ids.length : hi - lo;
    if (n <= target) {
      if (ids) return Array.prototype.slice.call(ids);
      var all = new Array(n);
      for (var i = 0; i < n; i++) all[i] = lo + i;
      return all;
    }
    var buckets = Math.max(1, Math.floor(target / 4)), tooMany = Infinity;
    var picked = m4(tr, ids, lo, hi, x0, x1, buckets);
    // A monotone run gives two points a bucket, clustered times leave buckets empty: search
    // for finer buckets that fill the target (a few passes, never over it).
    for (var round = 0; round < 4 && 2 * picked.length <= target; round++) {
      var finer = Math.min(tooMany - 1,
        Math.floor(buckets * Math.max(1.2, 0.9 * target / Math.max(picked.length, 1))));
      if (finer <= buckets) break;
      var candidate = m4(tr, ids, lo, hi, x0, x1, finer);
      if (candidate.length > target) tooMany = finer;
      else { picked = candidate; buckets = finer; }
    }
    return picked;
  }

  function union(a, b) {
    var out = [], i = 0, j = 0;
    while (i < a.length || j < b.length) {
      var v = j >= b.length || (i < a.length && a[i] <= b[j]) ? a[i++] : b[j++];
      if (out.length === 0 || out[out.length - 1] !== v) out.push(v);
    }
    return out;
  }

  // The view's budget shared among its traces: marks (rare points that must not vanish) take up
  // to marks_points each first; the rest is water-filled by cost, cheapest trace first, none
  // cut below floor_points.
  function allocate(metas, counts) {
    var cost = BUDGET.draw_cost, left = BUDGET.view_cost, targets = counts.slice();
    var pending = [];
    metas.forEach(function (t, i) {
      if (t.marks) {
        targets[i] = Math.min(counts[i], BUDGET.marks_points);
        left -= targets[i] * cost[t.kind];
      } else {
        pending.push(i);
      }
    });
    pending.sort(function (a, b) {
      return counts[a] * cost[metas[a].kind] - counts[b] * cost[metas[b].kind];
    });
    pending.forEach(function (i, served) {
      var share = Math.floor(Math.max(left, 0) / (pending.length - served));
      var w = cost[metas[i].kind];
      targets[i] = Math.min(counts[i], Math.max(Math.floor(share / w), BUDGET.floor_points));
      left -= targets[i] * w;
    });
    return targets;
  }

  // One formatter for the page: toLocaleString makes a new one per call, which cost more than
  // the thinning itself when a view's notes count points for every trace.
  var COUNT = new Intl.NumberFormat("en-US");
  function fmt(n) { return COUNT.format(n); }

  // What one plot draws over [x0, x1]: plotly traces, the y range of the data in view, a note.
  // `area`: the plot area's size in CSS pixels; `yFixed`: the y range the view is drawn on when
  // it does not fit the data in view (null: it does).
  function viewOf(p, prep, x0, x1, area, yFixed) {
    var spans = prep.traces.map(function (trace) {
      var tr = source(trace, x0, x1), n = tr.x.length;
      if (tr === trace.level) {
        // The whole trace is in view: its level stands for every one of its points.
        return { tr: tr, inLo: 0, inHi: n, lo: 0, hi: n, inView: trace.meta.n,
                 count: trace.meta.n };
      }
      var lo = lowerBound(tr.x, x0), hi = upperBound(tr.x, x1);
      var lineLike = trace.meta.kind === "line" || trace.meta.kind === "step";
      // Lines and steps reach the view's edges: one point beyond each side is drawn too.
      var span = { tr: tr, inLo: lo, inHi: hi, lo: lineLike ? Math.max(0, lo - 1) : lo,
                   hi: lineLike ? Math.min(n, hi + 1) : hi, inView: hi - lo };
      span.count = span.hi - span.lo;
      return span;
    });
    var counts = spans.map(function (s) { return s.count; });
    var targets = allocate(prep.traces.map(function (tr) { return tr.meta; }), counts);
    var yLow = Infinity, yHigh = -Infinity, notes = [], drawn = {};
    var picks = prep.traces.map(function (trace, ti) {
      var t = trace.meta, s = spans[ti], tr = s.tr, target = Math.max(targets[ti], 4), idx;
      if (tr.keep) {
        // A partial keep mask: the kept points in view first, M4 of the whole for the rest.
        var k0 = lowerBound(tr.keep, s.lo), k1 = lowerBound(tr.keep, s.hi);
        var kept = tr.keep.subarray(k0, k1);
        idx = kept.length >= target ? thin(tr, kept, 0, 0, x0, x1, target)
          : union(thin(tr, null, s.lo, s.hi, x0, x1, target - kept.length),
                  Array.prototype.slice.call(kept));
      } else {
        idx = thin(tr, null, s.lo, s.hi, x0, x1, target);
      }
      var inView = s.inView, shown = 0;
      for (var q = 0; q < idx.length; q++) if (idx[q] >= s.inLo && idx[q] < s.inHi) shown++;
      drawn[t.name] = [shown, inView];
      var name = t.name;
      if (shown < inView) {
        notes.push(t.name + ": " + fmt(shown) + " of " + fmt(inView) + " in view");
        if (t.marks) name += " (" + fmt(shown) + " of " + fmt(inView) + ")";
      }
      if (t.fit && t.visible) {
        var from = t.kind === "step" ? s.lo : s.inLo;
        for (var i = from; i < s.inHi; i++) {
          var a = tr.y[i], b = tr.yEnd ? tr.yEnd[i] : a;
          if (a === a) { if (a < yLow) yLow = a; if (a > yHigh) yHigh = a; }
          if (b === b && b > yHigh) yHigh = b;
        }
      }
      return { t: t, tr: tr, idx: idx, name: name };
    });
    var yRange = null;
    if (yLow <= yHigh) {
      var pad = (yHigh - yLow) * 0.04 || Math.abs(yHigh) * 0.05 || 1;
      yRange = [yLow - pad, yHigh + pad];
    }
    var yr = yFixed || yRange;
    var perPx = { x: (x1 - x0) / area.w, y: yr ? (yr[1] - yr[0]) / area.h : 0 };
    var out = [];
    picks.forEach(function (k) { out.push.apply(out, plotlyTrace(k.t, k.tr, k.idx, k.name, perPx)); });
    var note = notes.length
      ? "Thinned to the view's budget (each time slice's first, last, lowest and highest point): "
        + notes.join("; ") + ". Zoom in to see every one."
      : "Every point in view is drawn.";
    return { traces: out, yRange: yRange, note: note, drawn: drawn };
  }

  // A bar is SEGMENT_STRIDE points of its trace: the bar, its bottom tick and its top tick, each
  // a closed outline followed by a gap (NaN); the bar's outline starts at the segment's time and
  // first byte and passes its top, fourth. Ticks are TICK_PX wide.
  var TICK_PX = 6, SEGMENT_STRIDE = 17;
  status.segmentStride = SEGMENT_STRIDE;

  // Marker symbols as outlines in CSS pixels around the point (y up), each a closed polygon
  // followed by a gap (NaN); a ring's inner polygon winds the other way, so it is a hole.
  function ngon(k, r, clockwise) {
    var xs = [], ys = [];
    for (var i = 0; i < k; i++) {
      var a = 2 * Math.PI * (clockwise ? -i : i) / k;
      xs.push(r * Math.cos(a)); ys.push(r * Math.sin(a));
    }
    xs.push(NaN); ys.push(NaN);
    return { x: xs, y: ys };
  }
  function bar(angle, half, halfWidth) {  // a thin rectangle through the point
    var c = Math.cos(angle), s = Math.sin(angle), xs = [], ys = [];
    [[1, 1], [1, -1], [-1, -1], [-1, 1]].forEach(function (q) {
      xs.push(q[0] * half * c - q[1] * halfWidth * s);
      ys.push(q[0] * half * s + q[1] * halfWidth * c);
    });
    xs.push(NaN); ys.push(NaN);
    return { x: xs, y: ys };
  }
  function join(parts) {
    return { x: [].concat.apply([], parts.map(function (q) { return q.x; })),
             y: [].concat.apply([], parts.map(function (q) { return q.y; })) };
  }
  function polygon(points) {
    return { x: points.map(function (q) { return q[0]; }).concat([NaN]),
             y: points.map(function (q) { return q[1]; }).concat([NaN]) };
  }
  // Sized as plotly draws a size-7 marker with its 1.2 px outline.
  var SYMBOLS = {
    "circle": ngon(12, 4.1, false),
    "circle-open": join([ngon(12, 4.1, false), ngon(12, 2.9, true)]),
    "square": polygon([[-4.1, -4.1], [4.1, -4.1], [4.1, 4.1], [-4.1, 4.1]]),
    "diamond": polygon([[0, -5.4], [5.4, 0], [0, 5.4], [-5.4, 0]]),
    "triangle-up": polygon([[0, 5.2], [4.9, -3.3], [-4.9, -3.3]]),
    "triangle-down": polygon([[0, -5.2], [-4.9, 3.3], [4.9, 3.3]]),
    "x": join([bar(Math.PI / 4, 5.2, 1.5), bar(-Math.PI / 4, 5.2, 1.5)]),
    "x-thin": join([bar(Math.PI / 4, 4.6, 0.8), bar(-Math.PI / 4, 4.6, 0.8)]),
    "cross": join([bar(0, 5.2, 1.9), bar(Math.PI / 2, 5.2, 1.9)]),
  };
  status.markerStride = function (symbol) { return (SYMBOLS[symbol] || SYMBOLS.circle).x.length; };

  // `perPx`: the view's data units per CSS pixel of the plot area, {x, y}. A trace of the model
  // is one plotly trace, or two for markers (below).
  function plotlyTrace(t, tr, idx, name, perPx) {
    var n = idx.length, x = new Float64Array(n), y = new Float64Array(n);
    for (var i = 0; i < n; i++) { x[i] = tr.x[idx[i]]; y[i] = tr.y[idx[i]]; }
    var out = { name: name, type: "scatter", x: x, y: y,
                visible: t.visible ? true : "legendonly", hoverlabel: { namelength: -1 } };
    // A point that is a packet names its frame, as Wireshark numbers it (0: none known).
    var hover = null;
    if (tr.frame) {
      hover = new Array(n);
      for (var h = 0; h < n; h++) {
        var f = tr.frame[idx[h]];
        hover[h] = f > 0 ? "frame " + f : "";
      }
      out.hovertext = hover;
    }
    var line = { color: t.color, width: t.width, dash: t.dash };
    if (t.stack) { out.stackgroup = t.stack; out.fillcolor = t.color; }  // stacked, filled
    if (t.kind === "segments") {
      // A bar from y to y_end with a tick across each end, as tcptrace draws them (a bar shorter
      // than a pixel still shows, and a burst reads as a column). Every bar of the trace is one
      // filled SVG path: a stroked line is an SVG element per gap-separated piece, and a marker
      // per tick one more each, which made most of a plot's drawing time. The outlines are sized
      // in pixels at this view's scale, and every view is drawn afresh.
      var S = SEGMENT_STRIDE, w = Math.max(t.width, 1) / 2 * perPx.x;
      var tw = TICK_PX / 2 * perPx.x, th = Math.max(t.width, 1) / 2 * perPx.y;
      var bx = new Float64Array(S * n), by = new Float64Array(S * n);
      var ox = [0, w, w, 0, -w, -w, NaN, -tw, tw, tw, -tw, NaN, -tw, tw, tw, -tw, NaN];
      for (var j = 0; j < n; j++) {
        var a = y[j], b = tr.yEnd[idx[j]], xj = x[j], o = S * j;
        var oy = [a, a, b, b, b, a, NaN, a - th, a - th, a + th, a + th, NaN,
                  b - th, b - th, b + th, b + th, NaN];
        for (var m = 0; m < S; m++) { bx[o + m] = xj + ox[m]; by[o + m] = oy[m]; }
      }
      out.x = bx; out.y = by; out.mode = "none"; out.fill = "toself"; out.fillcolor = t.color;
      out.hoveron = "points"; out.connectgaps = false;
      if (hover) {
        var bh = new Array(S * n);
        for (var k = 0; k < n; k++) {
          for (var q = 0; q < S; q++) bh[S * k + q] = ox[q] === ox[q] ? hover[k] : "";
        }
        out.hovertext = bh;
      }
    } else if (t.kind === "step") {
      out.mode = "lines"; line.shape = "hv"; out.line = line;
    } else if (t.kind === "line") {
      out.mode = "lines"; out.line = line;
    } else {
      // Every marker of the trace is one filled SVG path too, its symbol's outline sized in
      // pixels: plotly draws and styles each marker as an element of its own, which made most
      // of a marker-heavy plot's drawing time. An empty trace of the same legend group shows
      // the symbol in the legend (a click there hides both).
      var shape = SYMBOLS[t.symbol] || SYMBOLS.circle, L = shape.x.length;
      var mx = new Float64Array(L * n), my = new Float64Array(L * n);
      for (var p2 = 0; p2 < n; p2++) {
        for (var v = 0; v < L; v++) {
          mx[L * p2 + v] = x[p2] + shape.x[v] * perPx.x;
          my[L * p2 + v] = y[p2] + shape.y[v] * perPx.y;
        }
      }
      var group = "markers: " + t.name;
      out.x = mx; out.y = my; out.mode = "none"; out.fill = "toself"; out.fillcolor = t.color;
      out.hoveron = "points"; out.connectgaps = false; out.showlegend = false;
      out.legendgroup = group;
      if (hover) {
        var mh = new Array(L * n);
        for (var p3 = 0; p3 < n; p3++) {
          for (var w2 = 0; w2 < L; w2++) mh[L * p3 + w2] = shape.x[w2] === shape.x[w2] ? hover[p3] : "";
        }
        out.hovertext = mh;
      }
      // (Empty when the view holds none: plotly leaves an empty trace out of the legend.)
      var key = { name: name, type: "scatter", x: n ? [null] : [], y: n ? [null] : [],
                  mode: "markers",
                  visible: out.visible, legendgroup: group, hoverinfo: "skip",
                  marker: { color: t.color, symbol: t.symbol, size: 7,
                            line: { color: t.color, width: 1.2 } } };
      return [out, key];
    }
    return [out];
  }

  // ---- findings' time ranges: outlined, faintly filled, below the data, named in the legend --

  function fmtS(v) { return (+v).toFixed(3); }

  // A shade marks a place in time by its contrast with the rest of the view. A finding that
  // covers half the view or more has no place to show there (more of the view lies inside it
  // than outside), and several such fills on top of each other only tint the data. Such a
  // finding is drawn as a band along the time axis instead, one row of bands each, still named
  // in the legend; zoomed in until it covers less than half the view, it is shaded again.
  var PLACE_SHARE = 0.5, BAND_PX = 5;
  function shadeShapes(p, xr) {
    var span = xr[1] - xr[0];
    var wide = p.shades.map(function (s) {
      return span > 0 && Math.min(s.x1, xr[1]) - Math.max(s.x0, xr[0]) >= PLACE_SHARE * span;
    });
    // However many overlap, their fills together stay faint: the data under them still reads.
    var depth = 1;
    p.shades.forEach(function (s, i) {
      if (wide[i]) return;
      var d = 0;
      p.shades.forEach(function (o, j) { if (!wide[j] && o.x0 <= s.x0 && s.x0 <= o.x1) d++; });
      depth = Math.max(depth, d);
    });
    var alpha = Math.min(0.08, 0.24 / depth);
    var row = 0;
    return p.shades.map(function (s, i) {
      var rgb = /rgba?\(([^)]*)\)/.exec(s.color);
      var parts = rgb ? rgb[1].split(",").slice(0, 3).join(",") : "215,25,28";
      // The legend names the finding and its range; the findings table above has the rest.
      var kind = s.label.split(":")[0];
      var shape = {
        type: "rect", xref: "x", yref: "paper", x0: s.x0, x1: s.x1, y0: 0, y1: 1,
        layer: "below", fillcolor: "rgba(" + parts + "," + alpha + ")",
        line: { color: "rgba(" + parts + ",0.6)", width: 1, dash: "dot" },
        showlegend: true, legendgroup: "findings",
        name: kind + " " + fmtS(s.x0) + "\u2013" + fmtS(s.x1) + " s",
      };
      if (wide[i]) {
        // Pixels up from the time axis, so the band keeps its height at any plot size.
        var y0 = row * (BAND_PX + 1);
        row++;
        Object.assign(shape, { ysizemode: "pixel", yanchor: 0, y0: y0, y1: y0 + BAND_PX,
                               fillcolor: "rgba(" + parts + ",0.45)",
                               line: { color: "rgba(" + parts + ",0.8)", width: 1 } });
      }
      return shape;
    });
  }

  var MARGIN = { l: 70, r: 40, t: 8, b: 44 };
  // The plot area of a plot this size: the margins, and the legend above it (its rows push the
  // top margin; one row, most often).
  var LEGEND_PX = 24;
  function areaOf(width, height) {
    return { w: Math.max(width - MARGIN.l - MARGIN.r, 1),
             h: Math.max(height - MARGIN.t - MARGIN.b - LEGEND_PX, 1) };
  }
  // A drawn plot's own plot area, as plotly laid it out; before its first drawing, an estimate.
  function plotArea(div) {
    var size = div._fullLayout && div._fullLayout._size;
    if (size && size.w > 0 && size.h > 0) return { w: size.w, h: size.h };
    return areaOf(div.clientWidth || PRINT_WIDTH, div.clientHeight || 320);
  }
  // The page's look of plot `p` over the time range `xr`.
  function layout(p, xr) {
    return {
      // The mode bar stands upright in the right margin, clear of the legend across the top.
      margin: Object.assign({}, MARGIN),
      modebar: { orientation: "v", bgcolor: "rgba(255,255,255,0.8)", color: "#8a93a3" },
      paper_bgcolor: "#ffffff", plot_bgcolor: "#ffffff",
      font: { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12,
              color: "#1d2433" },
      // The margins hold the tick labels; plotly's default ("hide past div") measures every
      // label, a page layout each, to hide one that would run past the plot's edge. Every
      // axis is a number line: named, plotly does not scan the data to guess its type.
      xaxis: { type: "linear", title: { text: p.x_label }, gridcolor: "#eceff3",
               zeroline: false, showline: true, linecolor: "#c9ced8", ticklabeloverflow: "allow" },
      yaxis: { type: "linear", title: { text: p.y_label }, gridcolor: "#eceff3",
               zeroline: false, showline: true, linecolor: "#c9ced8", exponentformat: "SI",
               ticklabeloverflow: "allow" },
      legend: { orientation: "h", x: 0, xanchor: "left", y: 1.0, yanchor: "bottom",
                font: { size: 11 }, bgcolor: "rgba(255,255,255,0)" },
      hovermode: "closest", dragmode: "zoom", shapes: shadeShapes(p, xr),
    };
  }

  // Plotly's own double-click would return to the thinned full view's autorange; the page does
  // it instead (plotly_doubleclick below), so the full view is thinned afresh.
  var CONFIG = { responsive: true, displaylogo: false, scrollZoom: false, doubleClick: false,
                 modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d", "resetScale2d"] };

  function dataExtent(prep) {
    var lo = Infinity, hi = -Infinity;
    prep.traces.forEach(function (trace) {
      var xs = (trace.level || trace.all).x;  // a level holds its trace's first and last point
      if (xs.length) { lo = Math.min(lo, xs[0]); hi = Math.max(hi, xs[xs.length - 1]); }
    });
    return lo <= hi ? [lo, hi] : [0, 1];
  }

  // A plot's decoded traces and the time range a view of `range` (null: the opening view)
  // shows, with every point decoded that the view needs.
  function readyFor(p, range) {
    return prepare(p, false).then(function (prep) {
      var xr = range || p.x_range || dataExtent(prep);
      if (!needsWhole(prep, xr[0], xr[1])) return { prep: prep, range: xr };
      return prepare(p, true).then(function () { return { prep: prep, range: xr }; });
    });
  }

  // Draw plot `div` over `range` (null: its opening view); `userY`, a y range the user chose on
  // this plot (a box zoom, a pan), is kept, any other view's y fits the data in view.
  function render(div, range, userY) {
    var p = byId[div.id];
    return readyFor(p, range).then(function (ready) {
      var opening = range === null, prep = ready.prep, xr = ready.range;
      var yFixed = userY || (opening && p.y_range ? p.y_range : null);
      var v = viewOf(p, prep, xr[0], xr[1], plotArea(div), yFixed);
      var look = layout(p, xr);
      var yr = yFixed || v.yRange;
      if (opening && !p.x_range) look.xaxis.autorange = true;
      else { look.xaxis.range = xr.slice(); look.xaxis.autorange = false; }
      if (yr) { look.yaxis.range = yr.slice(); look.yaxis.autorange = false; }
      else look.yaxis.autorange = true;
      var traces = v.traces;
      var note = document.getElementById(div.id + "-note");
      if (note) note.textContent = v.note;
      status.views[div.id] = { range: xr.slice(), drawn: v.drawn };
      var t1 = performance.now();
      var done = div.classList.contains("plotted")
        ? Plotly.react(div, traces, look, CONFIG) : Plotly.newPlot(div, traces, look, CONFIG);
      return done.then(function () {
        div.classList.add("plotted");
        return [prep.decodeMs, performance.now() - t1];
      });
    });
  }

  // ---- linked views: a connection's plots share one time range --------------------------

  var view = {};  // connection -> its current time range; null or absent: the opening view

  // Every drawn plot of `connection` to `range` (null: the opening view), after what is queued.
  function zoomTo(connection, range, source, userY) {
    view[connection] = range ? range.slice() : null;
    return enqueue(function () {
      var divs = document.querySelectorAll("#conn-" + connection + " .plot.drawn");
      return Promise.all(Array.prototype.map.call(divs, function (d) {
        return render(d, view[connection], d === source ? userY : null);
      }));
    });
  }

  function link(div, connection) {
    div.on("plotly_relayout", function (ev) {
      var xr = null, yr = null;
      if (ev["xaxis.range[0]"] !== undefined) xr = [+ev["xaxis.range[0]"], +ev["xaxis.range[1]"]];
      else if (ev["xaxis.range"]) xr = [+ev["xaxis.range"][0], +ev["xaxis.range"][1]];
      if (ev["yaxis.range[0]"] !== undefined) yr = [+ev["yaxis.range[0]"], +ev["yaxis.range[1]"]];
      else if (ev["yaxis.range"]) yr = [+ev["yaxis.range"][0], +ev["yaxis.range"][1]];
      if (ev["xaxis.autorange"]) { zoomTo(connection, null, null, null); return; }
      if (ev.autosize && !xr) {
        // Resized: the same view drawn afresh, its bars' outlines sized for the new pixels.
        var y = div.layout.yaxis || {};
        enqueue(function () {
          return render(div, view[connection] || null, y.autorange ? null : y.range.slice());
        });
        return;
      }
      if (!xr) return;  // a zoom of y alone: only this plot, nothing to re-thin
      zoomTo(connection, xr, div, yr);
    });
    div.on("plotly_doubleclick", function () { zoomTo(connection, null, null, null); });
  }

  function draw(div) {
    var p = byId[div.id];
    if (!p || div.classList.contains("drawn")) return Promise.resolve();
    div.classList.add("drawn");
    // A plot drawn after its connection was zoomed opens on the same time range.
    return render(div, view[p.connection] || null, null).then(function (ms) {
      status.plots[div.id] = p.traces.length;
      status.timings[div.id] = [Math.round(ms[0]), Math.round(ms[1])];
      status.lastDrawnMs = performance.now();
      link(div, p.connection);
      var shown = afterPaint().then(function () {
        if (status.paintedMs[div.id] === undefined) status.paintedMs[div.id] = performance.now();
      });
      // A plot on the screen (or at its edge, as the first screen's plots are): the next plot
      // waits until this one is painted, so it shows as soon as it is drawn. A plot further
      // below, drawn ahead of the reader, is painted with whatever is drawn next: waiting a
      // frame for each would only hold back the plots after it, which the reader is nearing.
      return nearScreen(div) ? shown : null;
    });
  }

  // Resolves once the page's next frame is painted: the frame's callback runs before its
  // rendering, and a task it posts runs only after that rendering is done (the event loop's
  // order, HTML 8.1.7.3), where a second frame's callback would wait a whole frame longer.
  var painted = [], paintChannel = new MessageChannel();
  paintChannel.port1.onmessage = function () { painted.shift()(); };
  function afterPaint() {
    return new Promise(function (resolve) {
      requestAnimationFrame(function () {
        painted.push(resolve);
        paintChannel.port2.postMessage(null);
      });
    });
  }

  // A closed section gives its plots' elements and decoded points back.
  function undraw(div) {
    if (!div.classList.contains("drawn")) return;
    Plotly.purge(div);
    div.classList.remove("drawn", "plotted");
    delete status.plots[div.id];
    delete prepared[div.id];
  }

  // Plots draw, and views change, one after another; plots draw only once they come near the
  // screen: the first screen is ready sooner, and a long report decodes and draws only the
  // plots someone looked at.
  var queue = plotlyReady.catch(function (err) { status.errors.push(String(err.message)); });
  function enqueue(step) {
    queue = queue.then(step).catch(function (err) {
      status.errors.push(String(err && err.message || err));
    });
    return queue;
  }
  // Resolves once every queued drawing and view change is done (for tests and benchmarks).
  status.idle = function () {
    var seen = queue;
    return seen.then(function () { return seen === queue ? true : status.idle(); });
  };

  // ---- print: every plot, as the page draws it, as an image ------------------------------

  // A plot draws only once it comes on screen, and a closed section gives its plots back, so a
  // page printed as it stands holds empty frames. "Print all plots" renders each plot at its
  // current view (the connection's zoom, else its opening view) as an image the print style
  // shows in its place, one after another, then opens the print dialog.
  var PRINT_WIDTH = 1000;
  function printImage(div) {
    var p = byId[div.id];
    if (!p) return Promise.resolve();
    return readyFor(p, view[p.connection] || null).then(function (ready) {
      var prep = ready.prep, range = ready.range;
      var height = div.offsetHeight || parseInt(div.style.height, 10) || 320;
      var yFixed = view[p.connection] ? null : p.y_range;
      var v = viewOf(p, prep, range[0], range[1], areaOf(PRINT_WIDTH, height), yFixed);
      var look = layout(p, range);
      look.xaxis.range = range.slice(); look.xaxis.autorange = false;
      var yr = yFixed || v.yRange;
      if (yr) { look.yaxis.range = yr.slice(); look.yaxis.autorange = false; }
      look.width = PRINT_WIDTH; look.height = height;
      return Plotly.toImage({ data: v.traces, layout: look, config: { staticPlot: true } },
        { format: "png", width: PRINT_WIDTH, height: height, scale: 2 });
    }).then(function (url) {
      var img = document.getElementById(div.id + "-print");
      if (!img) {
        img = document.createElement("img");
        img.id = div.id + "-print";
        img.className = "print-image";
        img.alt = "";
        div.parentNode.insertBefore(img, div.nextSibling);
      }
      img.src = url;
      div.classList.add("has-print-image");
    });
  }
  var printButton = document.getElementById("print-all");
  if (printButton) {
    printButton.addEventListener("click", function () {
      printButton.disabled = true;
      status.printReady = false;
      document.querySelectorAll(".plot").forEach(function (div) {
        enqueue(function () { return printImage(div); });
      });
      enqueue(function () {
        printButton.disabled = false;
        status.printReady = true;
        if (!status.noPrintDialog) window.print();
      });
    });
  }

  // A plot draws once it comes within a screen below the one shown (or 200 px above it): a
  // reader scrolling down finds the next screen's plots drawn while reading this one.
  var watcher = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (e.isIntersecting && e.target.closest("details").open) {
        enqueue(function () { return draw(e.target); });
      }
    });
  }, { rootMargin: "200px 0px 100% 0px" });
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
        else if (nearScreen(div)) enqueue(function () { return draw(div); });
      });
    });
  });
  // A link to a section or a finding opens it, and the folded group it is in.
  document.querySelectorAll("a[data-open]").forEach(function (a) {
    a.addEventListener("click", function () {
      var target = document.getElementById(a.getAttribute("data-open"));
      for (var d = target; d; d = d.parentElement && d.parentElement.closest("details")) {
        d.open = true;
      }
    });
  });

  // A finding is a place in the graph: clicking its row opens its connection and zooms every
  // plot of it to the finding's time range, with 5% of the range (at least 1 ms) either side.
  function zoomToFinding(row) {
    var connection = +row.getAttribute("data-conn");
    var r = row.getAttribute("data-range").split(",").map(Number);
    var margin = Math.max(0.05 * (r[1] - r[0]), 1e-3);
    var section = document.getElementById("conn-" + connection);
    if (!section) return null;
    section.open = true;
    var done = zoomTo(connection, [r[0] - margin, r[1] + margin], null, null);
    section.scrollIntoView({ block: "start" });
    return done;
  }
  // Any element that names a connection and a time range: a findings table row, a finding's
  // link to its connection.
  document.addEventListener("click", function (e) {
    var el = e.target.closest && e.target.closest("[data-conn][data-range]");
    if (!el) return;
    if (e.target.closest("a")) e.preventDefault();  // the zoom scrolls to the section itself
    zoomToFinding(el);
  });

  // A Wireshark filter's copy button copies the filter beside it. The page is a file, where
  // navigator.clipboard may be missing: a selected hidden text area and execCommand then.
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("button.copy");
    if (!button) return;
    e.preventDefault();
    var code = button.previousElementSibling;
    var text = code ? code.textContent : "";
    function fallback() {
      var area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      try { document.execCommand("copy"); } catch (err) { /* nothing more to try */ }
      document.body.removeChild(area);
    }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).catch(fallback);
    } else {
      fallback();
    }
    button.textContent = "copied";
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
  first.forEach(function (div) {
    // Decoded while plotly.js starts; the drawing takes the same promise (its errors too).
    if (byId[div.id]) prepare(byId[div.id], false).catch(function () {});
    enqueue(function () { return draw(div); });
  });
  status.idle().then(function () {
    // Ready once the drawn plots are on screen: the first frame after newPlot paints them, and a
    // callback of the frame after that runs only once it has.
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
