/* SPDX-License-Identifier: MIT */
/*
 * html.c — the HTML exporter: one self-contained page (inline CSS and
 * hand-written JS, no network access: a Content-Security-Policy forbids
 * every fetch) showing an icicle flame graph on a canvas with click-to-zoom,
 * search highlighting, thread and label filters, a sortable flat/cumulative
 * table and the profile's header.
 *
 * Context: any non-signal thread; no Ruby API.
 *
 * FORMAT
 *   PAGE_HEAD  <script type="application/json" id="rperf-data">DATA</script>
 *   PAGE_TAIL (<script> … </script></body></html>)
 * DATA is one JSON object:
 *   {"version":1,
 *    "meta":{"mode" ("cpu"|"wall"|"alloc"),
 *            allocation views only: "sample_type" ("alloc_objects"|…),
 *              "unit" ("objects"|"bytes": what weights count),
 *              "alloc_interval"|null,"alloc_sampled"|null,"alloc_live"|null,
 *            "frequency","start_time_ns"|null,"duration_ns"|null,
 *            "sampling_count"|null,"backend"|null,"rperf","ruby","entries",
 *            "total_ns" (time views) or "total" (allocation views): the
 *            sum of the weights},
 *    "frames":[[name, file, line], …],            one per view frame
 *    "threads":[[thread_seq, ractor_id, name|null, native_tid], …],
 *    "label_sets":[[[key, value], …], …],         index = label_set_id
 *    "parent":[…], "frame":[…],                   the call tree, see below
 *    "samples":[node, weight, thread_seq, label_set_id, …]}  flat, 4 per sample
 * An allocation view (sample type other than time) is drawn the same way:
 * weights are objects or bytes, shown with their unit; the object's class
 * is a label (`class`) of each sample, so the label filter selects classes.
 * The call tree merges every stack root first: node 0 is the root (no
 * frame); node i >= 1 has frame frame[i-1] and parent i - parent[i-1]
 * (a delta, mostly 1: short output), so parents come before children. A
 * sample points at the node of its leaf frame (the root for an empty stack).
 *
 * ESCAPING: the data sits in raw text that the HTML parser ends at the first
 * "</script"; "<!--" would switch it to an escaped state. Every string is
 * sanitised (invalid UTF-8 -> U+FFFD) and written with '<', '>', '&',
 * U+2028 and U+2029 as \uXXXX, '"', '\\' and control characters escaped, and
 * nothing but strings can hold those bytes, so the data contains no '<' at
 * all and always parses with JSON.parse. The page itself shows data only
 * through textContent and canvas text, never as markup.
 *
 * The page template (PAGE_HEAD / PAGE_TAIL) is plain HTML/CSS/JS kept as C
 * string literals: edit it as such (it must contain "</script" only where
 * it ends its own two script elements; the unit test checks).
 * See also exporter_internal.h, docs/exporters.md ("html").
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exporter_internal.h"

/* ---- the page ------------------------------------------------------------ */

static const char page_head[] =
    /* BEGIN HEAD */
    "<!DOCTYPE html>\n"
    "<html lang=\"en\">\n"
    "<head>\n"
    "<meta charset=\"utf-8\">\n"
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>rperf profile</title>\n"
    "<style>\n"
    "body { margin: 0; font: 13px/1.4 system-ui, -apple-system, 'Segoe UI', sans-serif; color: #222; background: #fafafa; }\n"
    "header { padding: 8px 12px; background: #263238; color: #eceff1; }\n"
    "header h1 { font-size: 15px; margin: 0 0 4px 0; font-weight: 600; }\n"
    "#meta { display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 0; }\n"
    "#meta div { white-space: nowrap; }\n"
    "#meta dt { display: inline; color: #90a4ae; }\n"
    "#meta dd { display: inline; margin: 0 0 0 4px; }\n"
    "#controls { display: flex; flex-wrap: wrap; align-items: center; gap: 6px 14px; padding: 6px 12px; background: #eceff1; border-bottom: 1px solid #cfd8dc; }\n"
    "#controls label { white-space: nowrap; }\n"
    "#controls input[type=search] { width: 220px; }\n"
    "#matched { color: #8e24aa; font-weight: 600; }\n"
    "#crumbs { padding: 4px 12px; min-height: 18px; color: #455a64; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }\n"
    "#wrap { position: relative; height: 62vh; overflow-y: auto; overflow-x: hidden; border-top: 1px solid #cfd8dc; border-bottom: 1px solid #cfd8dc; background: #fff; }\n"
    "#flame { position: sticky; top: 0; left: 0; display: block; cursor: pointer; }\n"
    "#spacer { width: 1px; }\n"
    "#tip { position: fixed; pointer-events: none; display: none; background: #fffde7; border: 1px solid #bbb; padding: 4px 6px; max-width: 60vw; font-size: 12px; box-shadow: 0 1px 4px rgba(0,0,0,.2); z-index: 10; word-break: break-all; }\n"
    "#tip b { font-weight: 600; }\n"
    "#tables { padding: 8px 12px 24px 12px; }\n"
    "#tables h2 { font-size: 14px; margin: 4px 0; }\n"
    "table { border-collapse: collapse; font-size: 12px; font-variant-numeric: tabular-nums; }\n"
    "th, td { padding: 2px 8px; border-bottom: 1px solid #e0e0e0; text-align: right; }\n"
    "th { background: #eceff1; cursor: pointer; user-select: none; position: sticky; top: 0; }\n"
    "th.sorted::after { content: ' \\25BC'; font-size: 9px; }\n"
    "th.sorted.asc::after { content: ' \\25B2'; }\n"
    "td.name, th.name { text-align: left; max-width: 55vw; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }\n"
    "td.file { text-align: left; color: #607d8b; white-space: nowrap; }\n"
    "tbody tr:hover { background: #fff8e1; cursor: pointer; }\n"
    "#note { color: #607d8b; margin: 4px 0; }\n"
    "</style>\n"
    "</head>\n"
    "<body>\n"
    "<header><h1 id=\"title\">rperf profile</h1><dl id=\"meta\"></dl></header>\n"
    "<div id=\"controls\">\n"
    "<label>Search <input type=\"search\" id=\"search\" placeholder=\"function or file\" spellcheck=\"false\"></label>\n"
    "<label><input type=\"checkbox\" id=\"regex\"> regex</label>\n"
    "<span id=\"matched\"></span>\n"
    "<label>Thread <select id=\"thread\"></select></label>\n"
    "<label>Label <select id=\"label\"></select></label>\n"
    "<button id=\"reset\" type=\"button\">Reset zoom</button>\n"
    "</div>\n"
    "<div id=\"crumbs\"></div>\n"
    "<div id=\"wrap\"><canvas id=\"flame\"></canvas><div id=\"spacer\"></div></div>\n"
    "<div id=\"tip\"></div>\n"
    "<div id=\"tables\"><h2>Top functions</h2><div id=\"note\"></div>\n"
    "<table id=\"top\"><thead><tr><th data-k=\"flat\">Flat</th><th data-k=\"flatp\">Flat%</th><th data-k=\"cum\">Cum</th><th data-k=\"cump\">Cum%</th><th data-k=\"name\" class=\"name\">Function</th><th data-k=\"file\" class=\"name\">Location</th></tr></thead><tbody></tbody></table>\n"
    "</div>\n"
    "<script type=\"application/json\" id=\"rperf-data\">\n"
    /* END HEAD */
    ;

static const char page_tail[] =
    /* BEGIN TAIL */
    "</script>\n"
    "<script>\n"
    "(function () {\n"
    "'use strict';\n"
    "var D = JSON.parse(document.getElementById('rperf-data').textContent);\n"
    "var M = D.meta, FR = D.frames, NF = FR.length, LS = D.label_sets, S = D.samples;\n"
    "var NS = S.length / 4, N = D.parent.length + 1;\n"
    "var $ = function (id) { return document.getElementById(id); };\n"
    "\n"
    "/* ---- the call tree: node 0 is the root, parents before children ---- */\n"
    "var par = new Int32Array(N), frm = new Int32Array(N), dep = new Int32Array(N);\n"
    "par[0] = -1; frm[0] = -1;\n"
    "for (var i = 1; i < N; i++) {\n"
    "  par[i] = i - D.parent[i - 1]; frm[i] = D.frame[i - 1]; dep[i] = dep[par[i]] + 1;\n"
    "}\n"
    "D.parent = D.frame = null;\n"
    "var fname = FR.map(function (f) { return f[0]; });\n"
    "var fnameLow = fname.map(function (s) { return s.toLowerCase(); });\n"
    "var floc = FR.map(function (f) { return f[2] > 0 ? f[1] + ':' + f[2] : f[1]; });\n"
    "/* children of each node, sorted by function name (counting sorts) */\n"
    "var order = fname.map(function (_, k) { return k; });\n"
    "order.sort(function (a, b) { return fname[a] < fname[b] ? -1 : fname[a] > fname[b] ? 1 : a - b; });\n"
    "var rank = new Int32Array(NF + 1);\n"
    "order.forEach(function (f, r) { rank[f] = r; });\n"
    "var cnt = new Int32Array(NF + 1), byRank = new Int32Array(N);\n"
    "for (i = 1; i < N; i++) cnt[rank[frm[i]] + 1]++;\n"
    "for (i = 1; i <= NF; i++) cnt[i] += cnt[i - 1];\n"
    "for (i = 1; i < N; i++) byRank[cnt[rank[frm[i]]]++] = i;\n"
    "var kidStart = new Int32Array(N + 1), kids = new Int32Array(N);\n"
    "for (i = 1; i < N; i++) kidStart[par[i] + 1]++;\n"
    "for (i = 1; i <= N; i++) kidStart[i] += kidStart[i - 1];\n"
    "var fill = kidStart.slice(0, N);\n"
    "for (i = 0; i < N - 1; i++) { var nd = byRank[i]; kids[fill[par[nd]]++] = nd; }\n"
    "fill = cnt = byRank = null;\n"
    "var maxDep = 0;\n"
    "for (i = 1; i < N; i++) if (dep[i] > maxDep) maxDep = dep[i];\n"
    "\n"
    "/* ---- colours ---- */\n"
    "function hash(s) { var h = 2166136261; for (var k = 0; k < s.length; k++) { h ^= s.charCodeAt(k); h = Math.imul(h, 16777619); } return h >>> 0; }\n"
    "var fcolor = FR.map(function (f) {\n"
    "  var h = hash(f[0]), file = f[1], r = h % 1000 / 1000, q = (h >>> 10) % 1000 / 1000;\n"
    "  if (file === '<GC>') return 'hsl(' + (95 + 30 * r).toFixed(0) + ',45%,' + (62 + 10 * q).toFixed(0) + '%)';\n"
    "  if (file === '<GVL>') return 'hsl(' + (255 + 30 * r).toFixed(0) + ',45%,' + (70 + 8 * q).toFixed(0) + '%)';\n"
    "  if (file === '<C method>') return 'hsl(' + (185 + 25 * r).toFixed(0) + ',45%,' + (66 + 10 * q).toFixed(0) + '%)';\n"
    "  return 'hsl(' + (8 + 42 * r).toFixed(0) + ',' + (75 + 15 * q).toFixed(0) + '%,' + (56 + 10 * r).toFixed(0) + '%)';\n"
    "});\n"
    "\n"
    "/* ---- formatting ---- */\n"
    "/* a weight in the profile's unit: time (ns), objects or bytes */\n"
    "var UNIT = M.unit || 'ns', TITLE = 'rperf ' + (M.sample_type && M.sample_type !== 'time' ? M.sample_type : M.mode) + ' profile';\n"
    "function val(v) {\n"
    "  if (UNIT === 'objects') return String(Math.round(v)).replace(/\\B(?=(\\d{3})+(?!\\d))/g, ',') + ' obj';\n"
    "  if (UNIT === 'bytes') {\n"
    "    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'], k = 0;\n"
    "    while (k < u.length - 1 && v >= Math.pow(1024, k + 1) * 0.99995) k++;\n"
    "    return k === 0 ? Math.round(v) + ' B' : (v / Math.pow(1024, k)).toFixed(1) + ' ' + u[k];\n"
    "  }\n"
    "  return ms(v);\n"
    "}\n"
    "function ms(ns) {\n"
    "  var v = ns / 1e6;\n"
    "  return (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(3)) + ' ms';\n"
    "}\n"
    "function pct(a, b) { return b > 0 ? (100 * a / b).toFixed(2) + '%' : '0.00%'; }\n"
    "function text(el, s) { el.textContent = s; return el; }\n"
    "function el(tag, s) { var e = document.createElement(tag); if (s !== undefined) e.textContent = s; return e; }\n"
    "\n"
    "/* ---- header ---- */\n"
    "var allTotal = 0;\n"
    "for (i = 0; i < NS; i++) allTotal += S[4 * i + 1];\n"
    "(function () {\n"
    "  var dl = $('meta');\n"
    "  function row(k, v) { var d = el('div'); d.appendChild(el('dt', k)); d.appendChild(el('dd', v)); dl.appendChild(d); }\n"
    "  text($('title'), TITLE);\n"
    "  document.title = TITLE;\n"
    "  row('Mode', M.mode);\n"
    "  if (UNIT !== 'ns') row('Sample type', M.sample_type);\n"
    "  if (M.mode !== 'alloc') row('Frequency', M.frequency ? M.frequency + ' Hz' : 'unknown');\n"
    "  if (UNIT !== 'ns') row('Allocation interval', M.alloc_interval ? String(M.alloc_interval) : 'unknown');\n"
    "  row('Duration', M.duration_ns != null ? ms(M.duration_ns) : 'unknown');\n"
    "  if (UNIT === 'ns') row('Samples', M.sampling_count != null ? String(M.sampling_count) : 'unknown');\n"
    "  else row('Sampled', M.alloc_sampled != null ? M.alloc_sampled + ' allocations, ' + M.alloc_live + ' live' : 'unknown');\n"
    "  row(UNIT === 'ns' ? 'Total weight' : 'Total', val(allTotal));\n"
    "  row('Stacks', String(NS));\n"
    "  row('Backend', M.backend ? M.backend : 'unknown');\n"
    "  if (M.start_time_ns != null) row('Started', new Date(M.start_time_ns / 1e6).toISOString());\n"
    "  row('rperf', M.rperf);\n"
    "  if (M.ruby) row('Ruby', M.ruby);\n"
    "})();\n"
    "\n"
    "/* ---- filters ---- */\n"
    "var threadInfo = {}, threadSeqs = [], threadW = {};\n"
    "D.threads.forEach(function (t) { threadInfo[t[0]] = t; });\n"
    "for (i = 0; i < NS; i++) { var sq = S[4 * i + 2]; threadW[sq] = (threadW[sq] || 0) + S[4 * i + 1]; }\n"
    "Object.keys(threadW).forEach(function (k) { threadSeqs.push(+k); });\n"
    "threadSeqs.sort(function (a, b) { return a - b; });\n"
    "(function () {\n"
    "  var sel = $('thread');\n"
    "  sel.appendChild(el('option', 'all threads')).value = '';\n"
    "  threadSeqs.forEach(function (sq) {\n"
    "    var t = threadInfo[sq], s = sq ? 'thread ' + sq : 'unknown thread';\n"
    "    if (t && t[2]) s += ' \"' + t[2] + '\"';\n"
    "    if (t && t[1]) s += ' (Ractor ' + t[1] + ')';\n"
    "    s += ' ' + pct(threadW[sq], allTotal);\n"
    "    sel.appendChild(el('option', s)).value = String(sq);\n"
    "  });\n"
    "})();\n"
    "var pairs = [], pairIdx = {}, setPairs = LS.map(function (set) {\n"
    "  return set.map(function (kv) {\n"
    "    var key = JSON.stringify(kv);\n"
    "    if (!(key in pairIdx)) { pairIdx[key] = pairs.length; pairs.push(kv); }\n"
    "    return pairIdx[key];\n"
    "  });\n"
    "});\n"
    "(function () {\n"
    "  var sel = $('label');\n"
    "  sel.appendChild(el('option', 'all labels')).value = '';\n"
    "  sel.appendChild(el('option', '(no labels)')).value = 'none';\n"
    "  var ord = pairs.map(function (_, k) { return k; });\n"
    "  ord.sort(function (a, b) { var x = pairs[a][0] + '=' + pairs[a][1], y = pairs[b][0] + '=' + pairs[b][1]; return x < y ? -1 : x > y ? 1 : 0; });\n"
    "  ord.forEach(function (k) { sel.appendChild(el('option', pairs[k][0] + '=' + pairs[k][1])).value = String(k); });\n"
    "})();\n"
    "\n"
    "var selfW = new Float64Array(N), totW = new Float64Array(N);\n"
    "function recompute() {\n"
    "  var th = $('thread').value, lb = $('label').value, tsq = th === '' ? -1 : +th;\n"
    "  var okSet = new Uint8Array(LS.length + 1);\n"
    "  for (var s = 0; s <= LS.length; s++) {\n"
    "    var ps = setPairs[s] || [];\n"
    "    okSet[s] = lb === '' ? 1 : lb === 'none' ? (ps.length === 0 ? 1 : 0) : (ps.indexOf(+lb) >= 0 ? 1 : 0);\n"
    "  }\n"
    "  selfW.fill(0);\n"
    "  for (var k = 0; k < NS; k++) {\n"
    "    var b = 4 * k;\n"
    "    if ((tsq < 0 || S[b + 2] === tsq) && okSet[S[b + 3] < LS.length ? S[b + 3] : LS.length] === 1) selfW[S[b]] += S[b + 1];\n"
    "  }\n"
    "  totW.set(selfW);\n"
    "  for (var n = N - 1; n > 0; n--) totW[par[n]] += totW[n];\n"
    "}\n"
    "\n"
    "/* ---- search ---- */\n"
    "var fmatch = new Uint8Array(NF), nmatch = new Uint8Array(N), searching = false, matchedW = 0, searchError = '';\n"
    "function runSearch() {\n"
    "  var q = $('search').value, rx = null;\n"
    "  searchError = '';\n"
    "  fmatch.fill(0);\n"
    "  searching = q.length > 0;\n"
    "  if (searching && $('regex').checked) {\n"
    "    try { rx = new RegExp(q); } catch (e) { searchError = 'bad regex'; searching = false; }\n"
    "  }\n"
    "  if (searching) {\n"
    "    var ql = q.toLowerCase();\n"
    "    for (var f = 0; f < NF; f++)\n"
    "      fmatch[f] = rx ? (rx.test(fname[f]) || rx.test(floc[f]) ? 1 : 0)\n"
    "                     : (fnameLow[f].indexOf(ql) >= 0 || floc[f].toLowerCase().indexOf(ql) >= 0 ? 1 : 0);\n"
    "  }\n"
    "  matchedW = 0;\n"
    "  nmatch[0] = 0;\n"
    "  for (var n = 1; n < N; n++) {\n"
    "    nmatch[n] = searching && (fmatch[frm[n]] || nmatch[par[n]]) ? 1 : 0;\n"
    "    if (nmatch[n]) matchedW += selfW[n];\n"
    "  }\n"
    "  text($('matched'), searchError ? searchError : searching ? 'matched ' + pct(matchedW, totW[0]) + ' (' + val(matchedW) + ')' : '');\n"
    "}\n"
    "\n"
    "/* ---- flame graph (icicle: root on top), canvas ---- */\n"
    "var ROW = 18, MINW = 0.5;\n"
    "var wrap = $('wrap'), canvas = $('flame'), spacer = $('spacer'), ctx = canvas.getContext('2d');\n"
    "/* as tall as the deepest stack, at most 62% of the window (then it scrolls) */\n"
    "function sizeWrap() { wrap.style.height = Math.max(120, Math.min(Math.round(window.innerHeight * 0.62), (maxDep + 2) * ROW)) + 'px'; }\n"
    "sizeWrap();\n"
    "var zoom = 0, rects = { x: [], y: [], w: [], n: [] }, drawnRects = 0, pending = false;\n"
    "ctx.font = '12px system-ui, sans-serif';\n"
    "var charW = ctx.measureText('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ#_').width / 55;\n"
    "function layout() {\n"
    "  var W = wrap.clientWidth, R = rects, stackN = [0], stackX = [0], stackW = [W];\n"
    "  R.x = []; R.y = []; R.w = []; R.n = [];\n"
    "  var a = par[zoom] >= 0 ? par[zoom] : -1;\n"
    "  while (a >= 0) { R.x.push(0); R.y.push(dep[a]); R.w.push(W); R.n.push(a); a = par[a]; }\n"
    "  stackN[0] = zoom;\n"
    "  var maxRow = dep[zoom];\n"
    "  while (stackN.length) {\n"
    "    var n = stackN.pop(), x = stackX.pop(), w = stackW.pop(), t = totW[n];\n"
    "    R.x.push(x); R.y.push(dep[n]); R.w.push(w); R.n.push(n);\n"
    "    if (dep[n] > maxRow) maxRow = dep[n];\n"
    "    if (t <= 0) continue;\n"
    "    var cx = x;\n"
    "    for (var k = kidStart[n]; k < kidStart[n + 1]; k++) {\n"
    "      var c = kids[k], ct = totW[c];\n"
    "      if (ct <= 0) continue;\n"
    "      var cw = w * ct / t;\n"
    "      if (cw >= MINW) { stackN.push(c); stackX.push(cx); stackW.push(cw); }\n"
    "      cx += cw;\n"
    "    }\n"
    "  }\n"
    "  drawnRects = R.n.length;\n"
    "  spacer.style.height = Math.max(0, (maxRow + 2) * ROW - wrap.clientHeight) + 'px';\n"
    "}\n"
    "function draw() {\n"
    "  pending = false;\n"
    "  var W = wrap.clientWidth, H = wrap.clientHeight, dpr = window.devicePixelRatio || 1, top = wrap.scrollTop;\n"
    "  if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {\n"
    "    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);\n"
    "    canvas.style.width = W + 'px'; canvas.style.height = H + 'px';\n"
    "  }\n"
    "  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);\n"
    "  ctx.clearRect(0, 0, W, H);\n"
    "  ctx.font = '12px system-ui, sans-serif';\n"
    "  ctx.textBaseline = 'middle';\n"
    "  var R = rects, zd = dep[zoom];\n"
    "  for (var k = 0; k < R.n.length; k++) {\n"
    "    var y = R.y[k] * ROW - top;\n"
    "    if (y + ROW < 0 || y > H) continue;\n"
    "    var n = R.n[k], x = R.x[k], w = R.w[k];\n"
    "    var col = n === 0 ? '#b0bec5' : searching && fmatch[frm[n]] ? '#e040fb' : fcolor[frm[n]];\n"
    "    ctx.globalAlpha = R.y[k] < zd ? 0.45 : 1;\n"
    "    ctx.fillStyle = col;\n"
    "    ctx.fillRect(x, y, Math.max(w - 1, 0.5), ROW - 1);\n"
    "    if (w > 24) {\n"
    "      var label = n === 0 ? 'all ' + val(totW[0]) : fname[frm[n]];\n"
    "      var fit = Math.floor((w - 6) / charW);\n"
    "      if (fit >= 2) {\n"
    "        if (label.length > fit) label = label.slice(0, fit - 1) + '\\u2026';\n"
    "        ctx.fillStyle = '#111';\n"
    "        ctx.fillText(label, x + 3, y + ROW / 2);\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  ctx.globalAlpha = 1;\n"
    "}\n"
    "function redraw() { if (!pending) { pending = true; requestAnimationFrame(draw); } }\n"
    "function refresh() { layout(); draw(); crumbs(); }\n"
    "function crumbs() {\n"
    "  var parts = [], a = zoom;\n"
    "  while (a > 0) { parts.unshift(fname[frm[a]]); a = par[a]; }\n"
    "  text($('crumbs'), parts.length ? 'zoomed: all \\u203a ' + parts.join(' \\u203a ') + '  (Esc or click a bar above to go back up)' : 'click a frame to zoom in');\n"
    "}\n"
    "function hit(ev) {\n"
    "  var r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, row = Math.floor((ev.clientY - r.top + wrap.scrollTop) / ROW);\n"
    "  var R = rects;\n"
    "  for (var k = 0; k < R.n.length; k++)\n"
    "    if (R.y[k] === row && x >= R.x[k] && x < R.x[k] + R.w[k]) return R.n[k];\n"
    "  return -1;\n"
    "}\n"
    "function setZoom(n) { zoom = n; refresh(); }\n"
    "canvas.addEventListener('click', function (ev) { var n = hit(ev); if (n >= 0) setZoom(n); });\n"
    "var tip = $('tip');\n"
    "canvas.addEventListener('mousemove', function (ev) {\n"
    "  var n = hit(ev);\n"
    "  if (n < 0) { tip.style.display = 'none'; return; }\n"
    "  tip.textContent = '';\n"
    "  tip.appendChild(el('b', n === 0 ? 'all' : fname[frm[n]]));\n"
    "  if (n > 0) tip.appendChild(el('div', floc[frm[n]]));\n"
    "  tip.appendChild(el('div', 'total ' + val(totW[n]) + ' (' + pct(totW[n], totW[0]) + '), self ' + val(selfW[n])));\n"
    "  tip.style.display = 'block';\n"
    "  var tx = ev.clientX + 14, ty = ev.clientY + 14;\n"
    "  if (tx + tip.offsetWidth > window.innerWidth) tx = Math.max(0, ev.clientX - tip.offsetWidth - 8);\n"
    "  if (ty + tip.offsetHeight > window.innerHeight) ty = Math.max(0, ev.clientY - tip.offsetHeight - 8);\n"
    "  tip.style.left = tx + 'px'; tip.style.top = ty + 'px';\n"
    "});\n"
    "canvas.addEventListener('mouseleave', function () { tip.style.display = 'none'; });\n"
    "wrap.addEventListener('scroll', redraw);\n"
    "window.addEventListener('resize', function () { sizeWrap(); layout(); redraw(); });\n"
    "document.addEventListener('keydown', function (ev) {\n"
    "  if (ev.key === 'Escape' && zoom > 0 && document.activeElement !== $('search')) setZoom(par[zoom]);\n"
    "});\n"
    "$('reset').addEventListener('click', function () { setZoom(0); });\n"
    "\n"
    "/* ---- top table: flat / cumulative per function ---- */\n"
    "var flat = new Float64Array(NF), cum = new Float64Array(NF), sortKey = 'flat', sortAsc = false, TOPN = 200;\n"
    "function computeTable() {\n"
    "  flat.fill(0); cum.fill(0);\n"
    "  var on = new Int32Array(NF), sn = [0], si = [kidStart[0]];\n"
    "  for (var n = 1; n < N; n++) flat[frm[n]] += selfW[n];\n"
    "  while (sn.length) {\n"
    "    var top = sn.length - 1, nd = sn[top];\n"
    "    if (si[top] < kidStart[nd + 1]) {\n"
    "      var c = kids[si[top]++];\n"
    "      if (totW[c] <= 0) continue;\n"
    "      var f = frm[c];\n"
    "      if (on[f]++ === 0) cum[f] += totW[c];\n"
    "      sn.push(c); si.push(kidStart[c]);\n"
    "    } else {\n"
    "      if (nd > 0) on[frm[nd]]--;\n"
    "      sn.pop(); si.pop();\n"
    "    }\n"
    "  }\n"
    "}\n"
    "function renderTable() {\n"
    "  var rows = [];\n"
    "  for (var f = 0; f < NF; f++) if (cum[f] > 0 || flat[f] > 0) rows.push(f);\n"
    "  var key = {\n"
    "    flat: function (f) { return flat[f]; }, flatp: function (f) { return flat[f]; },\n"
    "    cum: function (f) { return cum[f]; }, cump: function (f) { return cum[f]; },\n"
    "    name: function (f) { return fname[f]; }, file: function (f) { return floc[f]; }\n"
    "  }[sortKey];\n"
    "  rows.sort(function (a, b) {\n"
    "    var x = key(a), y = key(b), c = x < y ? -1 : x > y ? 1 : 0;\n"
    "    if (!sortAsc) c = -c;\n"
    "    return c || (fname[a] < fname[b] ? -1 : fname[a] > fname[b] ? 1 : a - b);\n"
    "  });\n"
    "  var tb = $('top').tBodies[0], frag = document.createDocumentFragment(), total = totW[0];\n"
    "  rows.slice(0, TOPN).forEach(function (f) {\n"
    "    var tr = el('tr');\n"
    "    tr.appendChild(el('td', val(flat[f]))); tr.appendChild(el('td', pct(flat[f], total)));\n"
    "    tr.appendChild(el('td', val(cum[f]))); tr.appendChild(el('td', pct(cum[f], total)));\n"
    "    var nm = el('td', fname[f]); nm.className = 'name'; nm.title = fname[f]; tr.appendChild(nm);\n"
    "    var fl = el('td', floc[f]); fl.className = 'file'; tr.appendChild(fl);\n"
    "    tr.addEventListener('click', function () { $('search').value = fname[f]; $('regex').checked = false; runSearch(); redraw(); });\n"
    "    frag.appendChild(tr);\n"
    "  });\n"
    "  tb.textContent = '';\n"
    "  tb.appendChild(frag);\n"
    "  text($('note'), rows.length > TOPN ? 'showing ' + TOPN + ' of ' + rows.length + ' functions' : rows.length + ' functions');\n"
    "  var ths = $('top').tHead.rows[0].cells;\n"
    "  for (var k = 0; k < ths.length; k++) ths[k].className = (ths[k].dataset.k === 'name' || ths[k].dataset.k === 'file' ? 'name' : '') +\n"
    "    (ths[k].dataset.k === sortKey ? ' sorted' + (sortAsc ? ' asc' : '') : '');\n"
    "}\n"
    "Array.prototype.forEach.call($('top').tHead.rows[0].cells, function (th) {\n"
    "  th.addEventListener('click', function () {\n"
    "    var k = th.dataset.k;\n"
    "    if (k === sortKey) sortAsc = !sortAsc; else { sortKey = k; sortAsc = k === 'name' || k === 'file'; }\n"
    "    renderTable();\n"
    "  });\n"
    "});\n"
    "\n"
    "var lastUpdateMs = 0;\n"
    "function update() { var t = performance.now(); recompute(); runSearch(); computeTable(); renderTable(); refresh(); lastUpdateMs = performance.now() - t; }\n"
    "$('thread').addEventListener('change', update);\n"
    "$('label').addEventListener('change', update);\n"
    "$('search').addEventListener('input', function () { var t = performance.now(); runSearch(); draw(); lastUpdateMs = performance.now() - t; });\n"
    "$('regex').addEventListener('change', function () { runSearch(); redraw(); });\n"
    "update();\n"
    "\n"
    "/* ---- read-only state for tests and debugging ---- */\n"
    "var loadMs = performance.now();\n"
    "function visible() {\n"
    "  var out = [];\n"
    "  for (var k = 0; k < rects.n.length; k++) { var n = rects.n[k]; out.push(n === 0 ? 'all' : fname[frm[n]]); }\n"
    "  return out;\n"
    "}\n"
    "function rectOf(name) {\n"
    "  var r = canvas.getBoundingClientRect();\n"
    "  for (var k = 0; k < rects.n.length; k++) {\n"
    "    var n = rects.n[k];\n"
    "    if ((n === 0 ? 'all' : fname[frm[n]]) === name)\n"
    "      return { x: r.left + rects.x[k] + rects.w[k] / 2, y: r.top + rects.y[k] * ROW - wrap.scrollTop + ROW / 2, w: rects.w[k] };\n"
    "  }\n"
    "  return null;\n"
    "}\n"
    "window.__rperf = Object.freeze({\n"
    "  ready: true,\n"
    "  loadMs: loadMs,\n"
    "  nodes: N,\n"
    "  stacks: NS,\n"
    "  get rects() { return drawnRects; },\n"
    "  get lastUpdateMs() { return lastUpdateMs; },\n"
    "  get zoom() { return zoom === 0 ? 'all' : fname[frm[zoom]]; },\n"
    "  get total() { return totW[0]; },\n"
    "  get allTotal() { return allTotal; },\n"
    "  get matched() { return matchedW; },\n"
    "  get matchedShare() { return totW[0] > 0 ? matchedW / totW[0] : 0; },\n"
    "  get highlighted() { var c = 0; for (var k = 0; k < rects.n.length; k++) if (searching && rects.n[k] > 0 && fmatch[frm[rects.n[k]]]) c++; return c; },\n"
    "  visible: visible,\n"
    "  rectOf: rectOf,\n"
    "  tableRows: function () {\n"
    "    return Array.prototype.map.call($('top').tBodies[0].rows, function (tr) {\n"
    "      return Array.prototype.map.call(tr.cells, function (td) { return td.textContent; });\n"
    "    });\n"
    "  }\n"
    "});\n"
    "})();\n"
    "</script>\n"
    "</body>\n"
    "</html>\n"
    /* END TAIL */
    ;

/* ---- the call tree -------------------------------------------------------- */

/* Nodes of the merged call tree, node 0 the root; (parent, frame) -> node
 * in an open-addressing table (linear probing, load <= 1/2). */
typedef struct {
    uint32_t *parent, *frame;   /* node -> parent node, frame index */
    size_t count, cap;
    uint64_t *keys;             /* (parent << 32 | frame) */
    uint32_t *vals;             /* node id; 0 = empty slot (the root is never a child) */
    size_t slots;               /* power of two */
} tree_t;

static uint64_t
mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static int
tree_init(tree_t *t, size_t expected)
{
    memset(t, 0, sizeof *t);
    t->cap = expected < 16 ? 16 : expected;
    t->slots = 32;
    while (t->slots < 2 * t->cap)
        t->slots <<= 1;
    t->parent = malloc(t->cap * sizeof *t->parent);
    t->frame = malloc(t->cap * sizeof *t->frame);
    t->keys = malloc(t->slots * sizeof *t->keys);
    t->vals = calloc(t->slots, sizeof *t->vals);
    if (!t->parent || !t->frame || !t->keys || !t->vals)
        return -ENOMEM;
    t->parent[0] = 0;
    t->frame[0] = 0;
    t->count = 1;
    return 0;
}

static void
tree_free(tree_t *t)
{
    free(t->parent);
    free(t->frame);
    free(t->keys);
    free(t->vals);
}

static int
tree_rehash(tree_t *t)
{
    size_t slots = t->slots * 2;
    uint64_t *keys = malloc(slots * sizeof *keys);
    uint32_t *vals = calloc(slots, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -ENOMEM;
    }
    for (size_t i = 0; i < t->slots; i++) {
        if (!t->vals[i])
            continue;
        size_t j = (size_t)mix64(t->keys[i]) & (slots - 1);
        while (vals[j])
            j = (j + 1) & (slots - 1);
        keys[j] = t->keys[i];
        vals[j] = t->vals[i];
    }
    free(t->keys);
    free(t->vals);
    t->keys = keys;
    t->vals = vals;
    t->slots = slots;
    return 0;
}

/* The child of `parent` with frame `frame`, created when missing. */
static int
tree_child(tree_t *t, uint32_t parent, uint32_t frame, uint32_t *out)
{
    uint64_t key = (uint64_t)parent << 32 | frame;
    size_t j = (size_t)mix64(key) & (t->slots - 1);
    while (t->vals[j]) {
        if (t->keys[j] == key) {
            *out = t->vals[j];
            return 0;
        }
        j = (j + 1) & (t->slots - 1);
    }
    if (t->count >= UINT32_MAX)
        return -EOVERFLOW;
    if (t->count == t->cap) {
        size_t cap = t->cap * 2;
        uint32_t *p = realloc(t->parent, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        t->parent = p;
        uint32_t *f = realloc(t->frame, cap * sizeof *f);
        if (!f)
            return -ENOMEM;
        t->frame = f;
        t->cap = cap;
    }
    uint32_t id = (uint32_t)t->count++;
    t->parent[id] = parent;
    t->frame[id] = frame;
    t->keys[j] = key;
    t->vals[j] = id;
    *out = id;
    if (2 * t->count > t->slots)
        return tree_rehash(t);
    return 0;
}

/* ---- output --------------------------------------------------------------- */

typedef struct {
    rperf_writer_t *w;
    rperf__buf_t out, scratch;
    tree_t tree;
    uint32_t *leaf;             /* sample -> node */
} html_state_t;

static int
put_i64(html_state_t *st, int64_t v)
{
    if (v < 0) {
        int rc = rperf__buf_append(&st->out, "-", 1);
        return rc ? rc : rperf__buf_put_u64(&st->out, (uint64_t)0 - (uint64_t)v);
    }
    return rperf__buf_put_u64(&st->out, (uint64_t)v);
}

/* A JSON string literal that is also safe inside an HTML script element
 * (see ESCAPING above). */
static int
put_str(html_state_t *st, const char *p, size_t n)
{
    return rperf__json_str(&st->out, &st->scratch, p, n, RPERF__JSON_HTML_SAFE);
}

static int
flush_out(html_state_t *st)
{
    return rperf__buf_flush(&st->out, st->w, RPERF__FLUSH_AT);
}

/* An optional number: the value when `flag` is set in the view, else null. */
static int
put_opt(html_state_t *st, const rperf_profile_view_t *v, uint32_t flag, int64_t val)
{
    return (v->flags & flag) ? put_i64(st, val) : rperf__buf_put_cstr(&st->out, "null");
}

static int
put_meta(html_state_t *st, const rperf_profile_view_t *v)
{
    int64_t total = 0;
    for (size_t i = 0; i < v->sample_count; i++)
        total += v->samples[i].weight;
    int rc;
    int alloc = v->sample_type != RPERF_VALUE_TIME;
    const char *unit = v->sample_type == RPERF_VALUE_ALLOC_SPACE ||
                               v->sample_type == RPERF_VALUE_INUSE_SPACE
                           ? "bytes"
                           : "objects";
    if ((rc = rperf__buf_put_cstr(&st->out, "{\"version\":1,\"meta\":{\"mode\":\"")) ||
        (rc = rperf__buf_put_cstr(&st->out, v->mode == RPERF_MODE_WALL    ? "wall"
                                            : v->mode == RPERF_MODE_ALLOC ? "alloc"
                                                                          : "cpu")) ||
        (rc = rperf__buf_put_cstr(&st->out, "\"")))
        return rc;
    /* Allocation views only (a time view's data is as it always was). */
    if (alloc &&
        ((rc = rperf__buf_put_cstr(&st->out, ",\"sample_type\":\"")) ||
         (rc = rperf__buf_put_cstr(&st->out, rperf_value_type_name(v->sample_type))) ||
         (rc = rperf__buf_put_cstr(&st->out, "\",\"unit\":\"")) ||
         (rc = rperf__buf_put_cstr(&st->out, unit)) ||
         (rc = rperf__buf_put_cstr(&st->out, "\",\"alloc_interval\":")) ||
         (rc = put_opt(st, v, RPERF_VIEW_HAS_ALLOC_INTERVAL, v->alloc_interval)) ||
         (rc = rperf__buf_put_cstr(&st->out, ",\"alloc_sampled\":")) ||
         (rc = put_opt(st, v, RPERF_VIEW_HAS_ALLOC_COUNTS, v->alloc_sampled)) ||
         (rc = rperf__buf_put_cstr(&st->out, ",\"alloc_live\":")) ||
         (rc = put_opt(st, v, RPERF_VIEW_HAS_ALLOC_COUNTS, v->alloc_live))))
        return rc;
    if ((rc = rperf__buf_put_cstr(&st->out, ",\"frequency\":")) || (rc = put_i64(st, v->frequency)) ||
        (rc = rperf__buf_put_cstr(&st->out, ",\"start_time_ns\":")) ||
        (rc = put_opt(st, v, RPERF_VIEW_HAS_START_TIME, v->start_time_ns)) ||
        (rc = rperf__buf_put_cstr(&st->out, ",\"duration_ns\":")) ||
        (rc = put_opt(st, v, RPERF_VIEW_HAS_DURATION, v->duration_ns)) ||
        (rc = rperf__buf_put_cstr(&st->out, ",\"sampling_count\":")) ||
        (rc = put_opt(st, v, RPERF_VIEW_HAS_SAMPLING_COUNT, v->sampling_count)) ||
        (rc = rperf__buf_put_cstr(&st->out, ",\"backend\":")) ||
        (rc = v->backend.len ? put_str(st, v->backend.ptr, v->backend.len) : rperf__buf_put_cstr(&st->out, "null")) ||
        (rc = rperf__buf_put_cstr(&st->out, ",\"rperf\":")) ||
        (rc = put_str(st, v->rperf_version.ptr, v->rperf_version.len)) ||
        (rc = rperf__buf_put_cstr(&st->out, ",\"ruby\":")) ||
        (rc = put_str(st, v->ruby_description.ptr, v->ruby_description.len)) ||
        (rc = rperf__buf_put_cstr(&st->out, ",\"entries\":")) || (rc = rperf__buf_put_u64(&st->out, v->sample_count)) ||
        (rc = rperf__buf_put_cstr(&st->out, alloc ? ",\"total\":" : ",\"total_ns\":")) ||
        (rc = put_i64(st, total)) ||
        (rc = rperf__buf_put_cstr(&st->out, "}")))
        return rc;
    return 0;
}

static int
put_tables(html_state_t *st, const rperf_profile_view_t *v)
{
    int rc;
    if ((rc = rperf__buf_put_cstr(&st->out, ",\"frames\":[")))
        return rc;
    for (size_t i = 0; i < v->frame_count; i++) {
        const rperf_view_frame_t *f = &v->frames[i];
        if ((rc = rperf__buf_put_cstr(&st->out, i ? ",[" : "[")))
            return rc;
        rc = f->name.len ? put_str(st, f->name.ptr, f->name.len) : rperf__buf_put_cstr(&st->out, "\"(unknown)\"");
        if (rc || (rc = rperf__buf_append(&st->out, ",", 1)) || (rc = put_str(st, f->file.ptr, f->file.len)) ||
            (rc = rperf__buf_append(&st->out, ",", 1)) || (rc = put_i64(st, f->line > 0 ? f->line : 0)) ||
            (rc = rperf__buf_append(&st->out, "]", 1)) || (rc = flush_out(st)))
            return rc;
    }
    if ((rc = rperf__buf_put_cstr(&st->out, "],\"threads\":[")))
        return rc;
    for (size_t i = 0; i < v->thread_count; i++) {
        const rperf_view_thread_t *t = &v->threads[i];
        if ((rc = rperf__buf_put_cstr(&st->out, i ? ",[" : "[")) || (rc = rperf__buf_put_u64(&st->out, t->thread_seq)) ||
            (rc = rperf__buf_append(&st->out, ",", 1)) || (rc = rperf__buf_put_u64(&st->out, t->ractor_id)) ||
            (rc = rperf__buf_append(&st->out, ",", 1)) ||
            (rc = t->name.len ? put_str(st, t->name.ptr, t->name.len) : rperf__buf_put_cstr(&st->out, "null")) ||
            (rc = rperf__buf_append(&st->out, ",", 1)) || (rc = put_i64(st, t->native_tid)) ||
            (rc = rperf__buf_append(&st->out, "]", 1)))
            return rc;
    }
    if ((rc = rperf__buf_put_cstr(&st->out, "],\"label_sets\":[")))
        return rc;
    for (size_t i = 0; i < v->label_set_count; i++) {
        const rperf_view_label_set_t *ls = &v->label_sets[i];
        if ((rc = rperf__buf_put_cstr(&st->out, i ? ",[" : "[")))
            return rc;
        for (uint32_t k = 0; k < ls->count; k++) {
            const rperf_view_label_t *l = &ls->labels[k];
            if ((rc = rperf__buf_put_cstr(&st->out, k ? ",[" : "[")) || (rc = put_str(st, l->key.ptr, l->key.len)) ||
                (rc = rperf__buf_append(&st->out, ",", 1)) || (rc = put_str(st, l->value.ptr, l->value.len)) ||
                (rc = rperf__buf_append(&st->out, "]", 1)))
                return rc;
        }
        if ((rc = rperf__buf_append(&st->out, "]", 1)) || (rc = flush_out(st)))
            return rc;
    }
    return rperf__buf_put_cstr(&st->out, "]");
}

/* Merge every stack into the call tree; st->leaf[i] = sample i's node. */
static int
build_tree(html_state_t *st, const rperf_profile_view_t *v)
{
    size_t frames_total = 0;
    for (size_t i = 0; i < v->sample_count; i++)
        frames_total += v->samples[i].depth;
    int rc = tree_init(&st->tree, frames_total / 2 + 16);
    if (rc)
        return rc;
    st->leaf = malloc((v->sample_count ? v->sample_count : 1) * sizeof *st->leaf);
    if (!st->leaf)
        return -ENOMEM;
    for (size_t i = 0; i < v->sample_count; i++) {
        const rperf_view_sample_t *s = &v->samples[i];
        uint32_t node = 0;
        for (uint32_t d = s->depth; d-- > 0;) /* root first */
            if ((rc = tree_child(&st->tree, node, s->frames[d], &node)))
                return rc;
        st->leaf[i] = node;
    }
    return 0;
}

static int
put_tree(html_state_t *st, const rperf_profile_view_t *v)
{
    const tree_t *t = &st->tree;
    int rc;
    if ((rc = rperf__buf_put_cstr(&st->out, ",\"parent\":[")))
        return rc;
    for (size_t i = 1; i < t->count; i++)
        if ((i > 1 && (rc = rperf__buf_append(&st->out, ",", 1))) || (rc = rperf__buf_put_u64(&st->out, i - t->parent[i])) ||
            (rc = flush_out(st)))
            return rc;
    if ((rc = rperf__buf_put_cstr(&st->out, "],\"frame\":[")))
        return rc;
    for (size_t i = 1; i < t->count; i++)
        if ((i > 1 && (rc = rperf__buf_append(&st->out, ",", 1))) || (rc = rperf__buf_put_u64(&st->out, t->frame[i])) ||
            (rc = flush_out(st)))
            return rc;
    if ((rc = rperf__buf_put_cstr(&st->out, "],\"samples\":[")))
        return rc;
    for (size_t i = 0; i < v->sample_count; i++) {
        const rperf_view_sample_t *s = &v->samples[i];
        if ((i && (rc = rperf__buf_append(&st->out, ",", 1))) || (rc = rperf__buf_put_u64(&st->out, st->leaf[i])) ||
            (rc = rperf__buf_append(&st->out, ",", 1)) || (rc = put_i64(st, s->weight)) ||
            (rc = rperf__buf_append(&st->out, ",", 1)) || (rc = rperf__buf_put_u64(&st->out, s->thread_seq)) ||
            (rc = rperf__buf_append(&st->out, ",", 1)) || (rc = rperf__buf_put_u64(&st->out, s->label_set_id)) ||
            (rc = flush_out(st)))
            return rc;
    }
    return rperf__buf_put_cstr(&st->out, "]}");
}

static int
html_run(html_state_t *st, const rperf_profile_view_t *v)
{
    int rc;
    if ((rc = build_tree(st, v)) || (rc = rperf__buf_append(&st->out, page_head, sizeof page_head - 1)) ||
        (rc = put_meta(st, v)) || (rc = put_tables(st, v)) || (rc = put_tree(st, v)) ||
        (rc = rperf__buf_put_cstr(&st->out, "\n")) || (rc = rperf__buf_append(&st->out, page_tail, sizeof page_tail - 1)))
        return rc;
    return rperf__buf_flush(&st->out, st->w, 0);
}

static int
html_encode(const rperf_profile_view_t *v, const rperf_export_options_t *opts, rperf_writer_t *w)
{
    (void)opts;
    html_state_t st;
    memset(&st, 0, sizeof st);
    st.w = w;
    int rc = html_run(&st, v);
    rperf__encode_result(w, "html", rc);
    rperf__buf_free(&st.out);
    rperf__buf_free(&st.scratch);
    tree_free(&st.tree);
    free(st.leaf);
    return rc;
}

const rperf_exporter_ops_t rperf_exporter_html = {
    .version = RPERF_EXPORTER_ABI_VERSION,
    .name = "html",
    .suffix = ".html",
    .description = "self-contained HTML flame graph (offline; zoom, search, filters, top table)",
    .gzip = 0,
    .encode = html_encode,
    .flags = RPERF_EXPORTER_F_TEXT,
};
