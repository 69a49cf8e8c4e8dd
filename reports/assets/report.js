/* dasim report: draws each figure's JSON (a <script type="application/json" data-figure>
 * element, written by reports/src/interactive.rs) with uPlot, into the <div class="chart">
 * before it. Hover a plot for the values under the cursor (in the legend, or the read-out
 * line of a timeline), click a legend entry to hide or show its series, drag across a plot to
 * zoom into that range of x and double-click to zoom back out. Nothing is fetched: the data
 * and the library are in the page. */
(function () {
  "use strict";

  var PLOT_HEIGHT = 360;
  var PANEL_HEIGHT = 150;

  /* A number as the figures print it: five significant digits, exponents for the very large
   * and the very small. */
  function fmt(v) {
    if (v == null || !isFinite(v)) return "–";
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3);
    return String(+v.toPrecision(5));
  }

  function percent(v) {
    return v == null || !isFinite(v) ? "–" : (100 * v).toFixed(1) + "%";
  }

  function rgba(hex, alpha) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + alpha + ")";
  }

  function element(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }

  function widthOf(el) {
    return Math.max(320, Math.floor(el.getBoundingClientRect().width));
  }

  /* The title and the grey note above a chart. */
  function header(el, spec) {
    el.appendChild(element("div", "chart-title", spec.title));
    if (spec.note) el.appendChild(element("div", "chart-note", spec.note));
  }

  /* A row of colour keys (for the charts whose legend is not uPlot's). */
  function keys(el, entries) {
    var row = element("div", "chart-keys");
    entries.forEach(function (k) {
      var key = element("span", "chart-key");
      var swatch = element("span", "swatch");
      swatch.style.background = k.color;
      key.appendChild(swatch);
      key.appendChild(document.createTextNode(k.label));
      row.appendChild(key);
    });
    el.appendChild(row);
  }

  var charts = [];

  function make(opts, data, el) {
    opts.width = widthOf(el);
    var u = new uPlot(opts, data, el);
    charts.push({ u: u, el: el });
    return u;
  }

  /* The points of one line as [x, y] columns, without non-finite points (and without
   * non-positive ones on a logarithmic axis). */
  function columns(xs, ysList, logY) {
    var keep = [];
    for (var i = 0; i < xs.length; i++) {
      var ok = xs[i] != null;
      ysList.forEach(function (ys) {
        ok = ok && ys[i] != null && (!logY || ys[i] > 0);
      });
      if (ok) keep.push(i);
    }
    return [keep.map(function (i) { return xs[i]; })].concat(
      ysList.map(function (ys) { return keep.map(function (i) { return ys[i]; }); }));
  }

  function lines(el, spec) {
    header(el, spec);
    var tables = [];
    var series = [{ label: spec.x_label, value: function (u, v) { return fmt(v); } }];
    var bands = [];
    var hidden = [];
    spec.lines.forEach(function (l) {
      var t = columns(l.x, [l.y], spec.log_y);
      tables.push(t);
      series.push({
        label: l.label,
        stroke: l.color,
        width: 2,
        dash: l.dash ? [8, 5] : undefined,
        spanGaps: true,
        points: { show: t[0].length === 1 ? true : undefined, size: 7, fill: l.color },
        value: function (u, v) { return fmt(v); }
      });
    });
    spec.bands.forEach(function (b) {
      tables.push(columns(b.x, [b.lo, b.hi], spec.log_y));
      var lo = series.length, hi = lo + 1;
      [lo, hi].forEach(function () {
        series.push({ label: "band", stroke: "transparent", width: 0, spanGaps: true,
                      points: { show: false } });
      });
      hidden.push(lo, hi);
      bands.push({ series: [hi, lo], fill: rgba(b.color, 0.16) });
    });
    if (!tables.length) return;
    var data = uPlot.join(tables);
    var u = make({
      height: PLOT_HEIGHT,
      scales: { x: { time: false }, y: spec.log_y ? { distr: 3, log: 10 } : {} },
      axes: [
        { label: spec.x_label, values: function (u, vs) { return vs.map(fmt); } },
        { label: spec.y_label, size: 70, values: function (u, vs) { return vs.map(fmt); } }
      ],
      series: series,
      bands: bands,
      focus: { alpha: 0.35 },
      cursor: {
        drag: { x: true, y: false },
        // Each line's own nearest point: the lines are joined on the union of their x
        // values, and uPlot's hover skips the values a line does not have.
        focus: { prox: 24 }
      },
      legend: { live: true }
    }, data, el);
    var rows = u.root.querySelectorAll(".u-legend .u-series");
    hidden.forEach(function (i) { if (rows[i]) rows[i].style.display = "none"; });
  }

  /* Bars between x − 0.4 and x + 0.4 (or a share of that, for `count` bars side by side). */
  function barsPath(count, slot) {
    if (count === 1) return uPlot.paths.bars({ size: [0.8, 64] });
    var w = 0.8 / count;
    return uPlot.paths.bars({
      disp: {
        x0: { unit: 1, values: function (u) {
          return u.data[0].map(function (x) { return x - 0.4 + slot * w; });
        } },
        size: { unit: 1, values: function () { return [w]; } }
      }
    });
  }

  /* An x range that pads the data's by `pad` when the whole range is shown, and is the
   * zoomed range otherwise. */
  function paddedRange(lo, hi, pad) {
    return function (u, min, max) {
      return min <= lo && max >= hi ? [lo - pad, hi + pad] : [min, max];
    };
  }

  function histograms(el, spec) {
    header(el, spec);
    var lo = Infinity, hi = -Infinity;
    spec.panels.forEach(function (p) {
      if (p.x.length) { lo = Math.min(lo, p.x[0]); hi = Math.max(hi, p.x[p.x.length - 1]); }
    });
    if (lo > hi) return;
    spec.panels.forEach(function (p, i) {
      var div = element("div", "chart-panel");
      el.appendChild(div);
      div.appendChild(element("div", "chart-caption", p.caption));
      // Every value from lo to hi, so that the x axis is shared and empty values read 0.
      var xs = [], ys = [];
      var at = {};
      p.x.forEach(function (x, j) { at[x] = p.y[j]; });
      for (var x = lo; x <= hi; x++) { xs.push(x); ys.push(at[x] || 0); }
      make({
        height: PANEL_HEIGHT,
        scales: { x: { time: false, range: paddedRange(lo, hi, 0.6) } },
        axes: [
          { label: i + 1 === spec.panels.length ? spec.x_label : null,
            values: function (u, vs) { return vs.map(fmt); } },
          { label: spec.y_label, size: 70, values: function (u, vs) { return vs.map(fmt); } }
        ],
        series: [
          { label: spec.x_label, value: function (u, v) { return fmt(v); } },
          { label: "count", fill: p.color, stroke: p.color, width: 0,
            paths: barsPath(1, 0), points: { show: false },
            value: function (u, v) { return v == null ? "–" : String(v); } }
        ],
        cursor: { drag: { x: true, y: false }, sync: { key: el.dataset.figure, setSeries: false } },
        legend: { live: true }
      }, [xs, ys], div);
    });
  }

  function bars(el, spec) {
    header(el, spec);
    var xs = spec.groups;
    if (!xs.length) return;
    var n = spec.series.length;
    var series = [{ label: spec.x_label, value: function (u, v) { return fmt(v); } }];
    var data = [xs];
    spec.series.forEach(function (s, i) {
      data.push(s.values);
      series.push({ label: s.label, fill: rgba(s.color, 0.85), stroke: s.color, width: 0,
                    paths: barsPath(n, i), points: { show: false },
                    value: function (u, v) { return fmt(v); } });
    });
    make({
      height: PLOT_HEIGHT,
      scales: { x: { time: false, range: paddedRange(xs[0], xs[xs.length - 1], 0.6) },
                y: { range: function (u, min, max) { return [0, max * 1.05 || 1]; } } },
      axes: [
        { label: spec.x_label, values: function (u, vs) { return vs.map(fmt); } },
        { label: spec.y_label, size: 70, values: function (u, vs) { return vs.map(fmt); } }
      ],
      series: series,
      cursor: { drag: { x: true, y: false } },
      legend: { live: true }
    }, data, el);
  }

  /* Where each worker's time went: bars stacked in the activities' order, drawn from the
   * whole bar down (each series is the running sum up to its activity and covers the ones
   * above it), so the legend lists the stack from its top. */
  function stacked(el, spec) {
    header(el, spec);
    var used = spec.activities.map(function (a, k) {
      return spec.panels.some(function (p) {
        return p.shares[k].some(function (v) { return v > 0; });
      });
    });
    spec.panels.forEach(function (p, i) {
      var div = element("div", "chart-panel");
      el.appendChild(div);
      div.appendChild(element("div", "chart-caption", p.caption));
      var xs = p.workers;
      if (!xs.length) return;
      var sums = [], running = xs.map(function () { return 0; });
      p.shares.forEach(function (share) {
        running = running.map(function (r, j) { return r + (share[j] || 0); });
        sums.push(running.slice());
      });
      var series = [{ label: "worker", value: function (u, v) { return fmt(v); } }];
      var data = [xs];
      for (var k = spec.activities.length - 1; k >= 0; k--) {
        if (!used[k] && k === spec.activities.length - 1) continue;
        var a = spec.activities[k];
        data.push(sums[k]);
        series.push({
          label: a.label, fill: a.color, stroke: a.color, width: 0,
          paths: barsPath(1, 0), points: { show: false },
          value: (function (own) {
            return function (u, v, si, idx) { return idx == null ? "–" : percent(own[idx]); };
          })(p.shares[k])
        });
      }
      make({
        height: PANEL_HEIGHT,
        scales: { x: { time: false, range: paddedRange(xs[0], xs[xs.length - 1], 0.6) },
                  y: { range: [0, 1] } },
        axes: [
          { label: i + 1 === spec.panels.length ? "worker" : null,
            values: function (u, vs) { return vs.map(fmt); } },
          { label: "share of time", size: 70,
            values: function (u, vs) { return vs.map(percent); } }
        ],
        series: series,
        cursor: { drag: { x: true, y: false }, sync: { key: el.dataset.figure, setSeries: false } },
        legend: { live: true }
      }, data, div);
    });
  }

  /* What each worker did when: one lane per worker (worker 0 on top), an interval per
   * activity, fault marks on top. The read-out line under the chart names the interval under
   * the cursor. */
  function gantt(el, spec) {
    header(el, spec);
    var hasDown = spec.lanes.some(function (l) {
      return l.intervals.some(function (iv) { return iv[0] === 4; });
    });
    var marksUsed = [false, false];
    spec.lanes.forEach(function (l) { l.marks.forEach(function (m) { marksUsed[m[1]] = true; }); });
    keys(el, spec.activities.filter(function (a, k) { return k < 4 || hasDown; })
      .concat(spec.marks.filter(function (m, k) { return marksUsed[k]; })));
    var n = Math.max(1, spec.lanes.length);
    var start = Infinity, end = -Infinity;
    spec.lanes.forEach(function (l) {
      l.intervals.forEach(function (iv) { start = Math.min(start, iv[1]); end = Math.max(end, iv[2]); });
    });
    if (spec.window) { start = spec.window[0]; end = spec.window[1]; }
    if (!(start < end)) { start = 0; end = 1; }
    var laneY = function (i) { return n - 1 - i; };
    var label = function (l) { return l.tag ? l.worker + " " + l.tag : String(l.worker); };
    var rowPx = Math.max(6, Math.min(26, Math.floor(2400 / n)));
    var readout = element("div", "chart-readout", "hover a lane for the interval under the cursor");

    function draw(u) {
      var ctx = u.ctx, min = u.scales.x.min, max = u.scales.x.max;
      var h = Math.max(1, (u.valToPos(0, "y", true) - u.valToPos(1, "y", true)) * 0.8);
      ctx.save();
      ctx.beginPath();
      ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
      ctx.clip();
      spec.lanes.forEach(function (l, i) {
        var y = u.valToPos(laneY(i), "y", true) - h / 2;
        l.intervals.forEach(function (iv) {
          if (iv[2] < min || iv[1] > max) return;
          var x0 = u.valToPos(iv[1], "x", true), x1 = u.valToPos(iv[2], "x", true);
          ctx.fillStyle = spec.activities[iv[0]].color;
          ctx.fillRect(x0, y, Math.max(1, x1 - x0), h);
        });
        l.marks.forEach(function (m) {
          if (m[0] < min || m[0] > max) return;
          var x = u.valToPos(m[0], "x", true), yc = y + h / 2, r = Math.max(2, h / 3);
          ctx.strokeStyle = spec.marks[m[1]].color;
          ctx.lineWidth = 1.5 * u.pxRatio;
          ctx.beginPath();
          if (m[1] === 0) {
            ctx.moveTo(x - r, yc - r); ctx.lineTo(x + r, yc + r);
            ctx.moveTo(x - r, yc + r); ctx.lineTo(x + r, yc - r);
          } else {
            ctx.arc(x, yc, r, 0, 2 * Math.PI);
          }
          ctx.stroke();
        });
      });
      ctx.restore();
    }

    function hover(u) {
      var left = u.cursor.left, top = u.cursor.top;
      if (left == null || left < 0) return;
      var t = u.posToVal(left, "x");
      var i = n - 1 - Math.round(u.posToVal(top, "y"));
      var l = spec.lanes[i];
      if (!l) { readout.textContent = "at " + fmt(t) + " s"; return; }
      var found = null;
      l.intervals.forEach(function (iv) { if (iv[1] <= t && t <= iv[2]) found = iv; });
      readout.textContent = "worker " + label(l) + " at " + fmt(t) + " s: " + (found
        ? spec.activities[found[0]].label + " from " + fmt(found[1]) + " to " + fmt(found[2]) +
          " s (" + fmt(found[2] - found[1]) + " s)"
        : "no interval recorded");
    }

    var ticks = [];
    var every = Math.ceil(n / 32);
    for (var i = 0; i < n; i += every) ticks.push(laneY(i));
    make({
      height: Math.min(900, rowPx * n + 70),
      scales: { x: { time: false, range: paddedRange(start, end, 0) },
                y: { range: [-0.5, n - 0.5] } },
      axes: [
        { label: "simulated time (s)", values: function (u, vs) { return vs.map(fmt); } },
        { label: "worker", size: 70, splits: function () { return ticks; },
          values: function (u, vs) {
            return vs.map(function (y) { var l = spec.lanes[n - 1 - y]; return l ? label(l) : ""; });
          } }
      ],
      series: [{}, { label: "lanes", points: { show: false } }],
      cursor: { drag: { x: true, y: false }, points: { show: false } },
      legend: { show: false },
      hooks: { draw: [draw], setCursor: [hover] }
    }, [[start, end], [null, null]], el);
    el.appendChild(readout);
  }

  /* A table whose rows sort by the column whose name is clicked (again: the other way);
   * numbers by value (a cell's data-v, or its text), empty cells last either way. */
  function sortable(table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      function sort() {
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
        var numeric = th.dataset.type === "number";
        var key = function (row) {
          var cell = row.cells[col];
          var text = cell.dataset.v != null ? cell.dataset.v : cell.textContent;
          return text === "" ? null : numeric ? parseFloat(text) : text;
        };
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          if (x === null || y === null) return (x === null) - (y === null);
          return dir * (numeric ? x - y : x.localeCompare(y, undefined, { numeric: true }));
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") sort(); });
    });
  }

  var renderers = { lines: lines, histograms: histograms, bars: bars, stacked: stacked, gantt: gantt };

  function renderAll() {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), sortable);
    var scripts = document.querySelectorAll("script[type='application/json'][data-figure]");
    Array.prototype.forEach.call(scripts, function (script) {
      var el = document.getElementById("chart-" + script.dataset.figure);
      var spec = JSON.parse(script.textContent);
      var draw = renderers[spec.kind];
      if (!el || !draw) return;
      el.dataset.figure = script.dataset.figure;
      draw(el, spec);
      el.classList.add("drawn");
    });
    // For scripts run on the page (and the report's browser tests): each chart's uPlot
    // instance and the element it is drawn in.
    window.dasimCharts = charts;
  }

  var pending = null;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      charts.forEach(function (c) {
        c.u.setSize({ width: widthOf(c.el), height: c.u.height });
      });
    }, 100);
  });

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", renderAll);
  } else {
    renderAll();
  }
})();
