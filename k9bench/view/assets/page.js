"use strict";
(function () {
  var T = window.k9timings = {start: performance.now()};
  var D = JSON.parse(document.getElementById("k9data").textContent);
  T.parsed = performance.now();
  var Q = D.questions, R = D.runs, multi = R.length > 1, AXES = ["Logic", "Factuality", "Accuracy", "Conciseness", "Overall"];
  var $ = function (id) { return document.getElementById(id); };
  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function pct(v) { return v == null ? "n/a" : v.toFixed(1) + "%"; }
  function signed(v) { return v == null ? "n/a" : (v >= 0 ? "+" : "") + v.toFixed(1); }
  function fmtP(p) {  // as report.md writes it (Python's .4g)
    if (p == null) return "n/a";
    if (p !== 0 && (p < 1e-4 || p >= 1e16)) { var e = p.toExponential(3).split("e"); var x = +e[1];
      return String(+e[0]) + "e" + (x < 0 ? "-" : "+") + (Math.abs(x) < 10 ? "0" : "") + Math.abs(x); }
    return String(+p.toPrecision(4));
  }
  function kb(n) { return n < 1048576 ? (n / 1024).toFixed(0) + " KB" : (n / 1048576).toFixed(1) + " MB"; }
  function chip(a, title) {
    var v = a ? a.v : "none", t = {correct: "\u2713", wrong: "\u2717", failed: "F", none: "\u2013"}[v];
    return '<span class="chip v-' + v + '" title="' + esc(title || "") + " " + v + '">' + t + "</span>";
  }
  function pv(q, k) { var a = q.r[k]; return a && a.p != null ? a.p : null; }  // 1 right, 0 wrong/failed, null n/a
  function gvOf(a) { return a && a.gv ? a.gv : 0; }  // which ground truth and options the run's file gives (0: the first's)
  function gOf(q, a) { return gvOf(a) ? q.gv[gvOf(a)][0] : q.g; }
  function oOf(q, a) { return gvOf(a) ? q.gv[gvOf(a)][1] : q.o; }
  function differ(q) {  // two runs with the same ground truth and options, one right and one wrong
    var seen = {};
    return q.r.some(function (a) {
      if (!a || a.p == null) return false;
      var k = gvOf(a) + ":" + (1 - a.p);
      seen[gvOf(a) + ":" + a.p] = 1;
      return !!seen[k];
    });
  }
  function margin(a, g) {  // similarity of the ground truth minus the closest other option
    if (!a || !a.x) return null;
    var k = "ABCDE".indexOf(g), best = null;
    if (k < 0 || a.x[k] == null) return null;
    a.x.forEach(function (v, j) { if (j !== k && v != null && (best == null || v > best)) best = v; });
    return best == null ? null : a.x[k] - best;
  }
  function top(a) { return a && a.x ? Math.max.apply(null, a.x.map(function (v) { return v == null ? -1 : v; })) : null; }
  function judge(a) { return a && a.j && typeof a.j[4] === "number" ? a.j[4] : null; }
  Q.forEach(function (q) {
    q._t = (q.i + " " + q.c + " " + q.s + " " + q.q + " " + q.o.join(" ") + " " +
      q.r.map(function (a) { return a ? a.a + " " + (a.e || "") + " " + (a.f || "") : ""; }).join(" ")).toLowerCase();
    q._dis = multi && differ(q);
  });

  // ---------------------------------------------------------------- header
  var notes = D.notes.map(function (n) { return '<div class="note">' + esc(n) + "</div>"; }).join("");
  R.forEach(function (r) {
    if (r.mark) notes += '<div class="note">' + esc(r.label) + ": " + esc(r.mark) + " (" + esc(r.differences.join("; ")) + ")</div>";
  });
  $("notes").innerHTML = notes;
  var few = R.length <= 3;
  var head = "<details" + (few ? " open" : "") + "><summary><b>" + R.length + " run" + (R.length === 1 ? "" : "s") +
    "</b>: accuracy, standing against the paper, settings</summary><div class=wide><table><tr><th>run</th><th>file</th><th>accuracy</th><th>failed</th><th>standing</th><th>settings</th></tr>";
  R.forEach(function (r, k) {
    var n = 0, ok = 0, failed = 0, judged = 0;
    Q.forEach(function (q) {
      var a = q.r[k];
      if (a) { n++; if (a.v === "correct") ok++; if (a.v === "failed") failed++; if (a.v === "correct" || a.v === "wrong") judged++; }
    });
    var sets = r.rows.map(function (x) { return esc(x[0]) + ": " + esc(x[1]); }).join("<br>");
    if (r.unconfirmed.length) sets += "<br>unconfirmed: " + esc(r.unconfirmed.join("; "));
    head += "<tr><td><b>" + (k + 1) + ". " + esc(r.label) + "</b></td><td class=small>" + esc(r.path) + (r.judge ? "<br>judge: " + esc(r.judge) : "") +
      "</td><td>" + (judged ? pct(n ? 100 * ok / n : null) + " (" + ok + "/" + n + ")" : "no verdicts (" + esc(r.stage) + " file)") +
      "</td><td>" + failed + "</td><td" + (r.mark ? ' class="mark"' : "") + ">" + esc(r.standing) +
      "</td><td><details><summary>settings</summary>" + sets + "</details></td></tr>";
  });
  head += "</table></div></details>";
  var thumbs = Object.keys(D.thumbs).length;
  head += '<div class="small">frames/ folder: ' + kb(D.frames_bytes) + " for " + thumbs + " video(s)" +
    (D.thumb_notes.length ? "; " + esc(D.thumb_notes.join("; ")) : "") +
    '. <button type="button" id="keys-btn" aria-expanded="false" aria-controls="keys">Keys (?)</button></div>' +
    '<div id="keys" hidden><h2>Keys</h2><table><tr><th scope="row"><kbd>j</kbd> <kbd>\u2193</kbd></th><td>next question</td></tr>' +
    '<tr><th scope="row"><kbd>k</kbd> <kbd>\u2191</kbd></th><td>previous question</td></tr>' +
    '<tr><th scope="row"><kbd>Tab</kbd>, <kbd>Enter</kbd></th><td>reach the question list, open the focused question</td></tr>' +
    '<tr><th scope="row"><kbd>/</kbd></th><td>search</td></tr><tr><th scope="row"><kbd>c</kbd></th><td>copy the open question\'s id</td></tr>' +
    '<tr><th scope="row"><kbd>?</kbd></th><td>this help</td></tr><tr><th scope="row"><kbd>Esc</kbd></th><td>close it, leave the search box</td></tr></table>' +
    '<p class="small">They work from anywhere but a text box (the arrows also not in a menu, which they move).</p></div>';
  $("runs").innerHTML = head;
  var across = "";
  if (D.across) {
    var A = D.across;
    across += "<details" + (few ? " open" : "") + "><summary><b>Across runs</b>: agreement, accuracy on the " + A.common + " common questions</summary>";
    across += '<h2>Agreement (share of the questions both runs have a verdict for on which it is the same; right, or wrong and failed alike)</h2>' +
      '<div class=wide><table class="matrix"><tr><th scope="col">run</th>' + R.map(function (r, k) { return '<th scope="col">' + (k + 1) + ". " + esc(r.label) + "</th>"; }).join("") + "</tr>";
    A.agreement.forEach(function (row, k) {
      across += '<tr><th scope="row">' + (k + 1) + ". " + esc(R[k].label) + "</th>" + row.map(function (v, j) {
        var c = A.pairs[k][j];
        return '<td title="' + c.n + " questions: both right " + c.rr + ", row right and column wrong " + c.rw + ", row wrong and column right " +
          c.wr + ", both wrong " + c.ww + '">' + pct(v) + "</td>"; }).join("") + "</tr>";
    });
    across += '</table></div><h2>Accuracy per category, common questions only (those whose video every run had)</h2><div class=wide><table class="matrix"><tr><th scope="col">run</th>' +
      D.categories.map(function (c) { return '<th scope="col">' + esc(c) + "</th>"; }).join("") + '<th scope="col">overall</th></tr>';
    A.by_category.forEach(function (line, k) {
      across += '<tr><th scope="row">' + (k + 1) + ". " + esc(R[k].label) + "</th>" + D.categories.concat(["overall"]).map(function (c) {
        return "<td>" + pct(line[c]) + "</td>"; }).join("") + "</tr>";
    });
    across += "</table></div></details>";
  }
  var P = D.paired;
  if (P) {
    across += '<details open id="paired"><summary><b>Paired comparison</b> (report.json)</summary>';
    var sc = P.scoring || {run: {}, baseline: {}};
    var scored = "Scored with threshold " + esc(sc.run.threshold) + " and embedding model " + esc(sc.run.embedding_model) +
      " (the baseline: " + esc(sc.baseline.threshold) + ", " + esc(sc.baseline.embedding_model) + ").";
    if (P.comparable === false) {
      across += '<p class="mark">' + esc(P.run_label) + " against " + esc(P.baseline_label) + ": " + esc(P.reason) + ".</p><p>" + scored + "</p>";
    } else {
      var link = function (kind, n, text) {
        return P.run_k != null && P.base_k != null && n != null ? '<button type="button" class="pairlink" data-pair="' + kind + '">' + n + " " + text + "</button>" : n + " " + text;
      };
      across += "<p><b>" + esc(P.run_label) + "</b> minus the baseline <b>" + esc(P.baseline_label) + "</b> on " + P.n_common_questions +
        " common questions (" + P.n_common_videos + " videos): <b class=headline>" + signed(P.diff) +
        (P.ci_low != null ? " [" + signed(P.ci_low) + ", " + signed(P.ci_high) + "]" : "") + ", clustered p = " + fmtP(P.clustered_p) +
        "</b> (accuracy " + (P.acc_run == null ? "n/a" : P.acc_run.toFixed(1)) + " vs " + (P.acc_baseline == null ? "n/a" : P.acc_baseline.toFixed(1)) +
        "; difference in points, 95% " + esc(P.ci_method || "interval") + "; " + esc(P.test_method || "") + ").</p><p>" +
        link("rw", P.mcnemar_b, "questions: run right, baseline wrong (b)") + " " + link("wr", P.mcnemar_c, "questions: run wrong, baseline right (c)") +
        "; exact McNemar p = " + fmtP(P.mcnemar_p) + " (" + esc(P.mcnemar_assumption || "assumes independent questions") + ").</p>" +
        (P.reason ? "<p>Interval and test n/a: " + esc(P.reason) + ".</p>" : "") +
        (P.n_mismatched ? "<p>Left out by the report: " + P.n_mismatched + " questions whose ground truth or options differ (idx " +
          esc((P.mismatched_idx || []).join(", ")) + ").</p>" : "") + '<p class="small">' + scored + "</p>";
    }
    across += "</details>";
  }
  $("across").innerHTML = across;

  // ---------------------------------------------------------------- filters
  var videos = [], vseen = {};
  Q.forEach(function (q) { if (!vseen[q.s]) { vseen[q.s] = 1; videos.push(q.s); } });
  function opts(values) {
    return values.map(function (v) {
      var value = typeof v === "string" ? v : v[0], text = typeof v === "string" ? v : v[1];
      return '<option value="' + esc(value) + '" data-text="' + esc(text) + '">' + esc(text) + "</option>"; }).join("");
  }
  function sel(id, label, values, all) {
    return '<label>' + label + ' <select id="' + id + '">' + (all === false ? "" : '<option value="">all</option>') + opts(values) + "</select></label>";
  }
  var runOpts = R.map(function (r, k) { return [String(k), (k + 1) + ". " + r.label]; });
  var verdicts = [["correct", "correct"], ["wrong", "wrong"], ["failed", "failed"], ["none", "no verdict"]];
  if (multi) verdicts.push(["disagree", "differ across runs"]);
  var PAIRS = [["rw", "A right, B wrong"], ["wr", "A wrong, B right"], ["ww", "both wrong"], ["rr", "both right"]];
  var JUDGE = [["lo", "overall < 4"], ["mid", "overall 4 to 6"], ["hi", "overall 7 or more"], ["none", "no judge score"]];
  var MARGIN = [["far-", "GT behind by > 0.1"], ["near-", "GT behind by \u2264 0.1"], ["near+", "GT ahead by \u2264 0.1"],
    ["far+", "GT ahead by > 0.1"], ["none", "no similarities"]];
  $("filters").innerHTML = (multi ? sel("f-run", "run", runOpts, false) : "") +
    sel("f-cat", "category", D.categories) + sel("f-verdict", "verdict", verdicts) +
    (multi ? '<span class="group">' + sel("f-pair", "compare", PAIRS) + sel("f-a", "A", runOpts, false) + sel("f-b", "B", runOpts, false) + "</span>" : "") +
    sel("f-judge", "judge", JUDGE) + sel("f-margin", "margin", MARGIN) +
    sel("f-bin", "duration", D.bins) + sel("f-video", "video", videos) +
    '<label>text <input id="f-text" type="search" size="14" placeholder="search"></label>' +
    sel("f-sort", "sort", [["i", "idx"], ["c", "category"], ["s", "video"], ["d", "duration"], ["x", "top similarity"], ["m", "similarity margin"],
      ["j", "judge overall"]], false) +
    '<span class="group"><button type="button" id="export-csv">CSV</button><button type="button" id="export-json">JSON</button></span>' +
    '<span id="count" role="status"></span>';
  var F = {run: $("f-run"), cat: $("f-cat"), verdict: $("f-verdict"), pair: $("f-pair"), a: $("f-a"), b: $("f-b"), judge: $("f-judge"),
    margin: $("f-margin"), bin: $("f-bin"), video: $("f-video"), text: $("f-text"), sort: $("f-sort")};
  if (F.b) F.b.value = "1";
  function runK() { return F.run ? +F.run.value : 0; }
  function band(name, q) {  // the option of a score filter a question falls in, for the chosen run
    var a = q.r[runK()];
    if (name === "judge") { var j = judge(a); return j == null ? "none" : j < 4 ? "lo" : j < 7 ? "mid" : "hi"; }
    var m = margin(a, gOf(q, a));
    return m == null ? "none" : m < -0.1 ? "far-" : m < 0 ? "near-" : m <= 0.1 ? "near+" : "far+";
  }
  function pairOf(q) {
    var x = pv(q, +F.a.value), y = pv(q, +F.b.value);
    if (x == null || y == null || gvOf(q.r[+F.a.value]) !== gvOf(q.r[+F.b.value])) return null;
    return (x ? "r" : "w") + (y ? "r" : "w");
  }
  var tests = {
    cat: function (q, v) { return q.c === v; },
    bin: function (q, v) { return q.d === v; },
    video: function (q, v) { return q.s === v; },
    verdict: function (q, v) {
      if (v === "disagree") return q._dis;
      var a = q.r[runK()];
      return !!a && a.v === v;
    },
    pair: function (q, v) { return pairOf(q) === v; },
    judge: function (q, v) { return band("judge", q) === v; },
    margin: function (q, v) { return band("margin", q) === v; }
  };
  var keyOf = {
    cat: function (q) { return [q.c]; },
    bin: function (q) { return [q.d]; },
    video: function (q) { return [q.s]; },
    verdict: function (q) { var a = q.r[runK()], out = a ? [a.v] : []; if (q._dis) out.push("disagree"); return out; },
    pair: function (q) { var p = pairOf(q); return p ? [p] : []; },
    judge: function (q) { return [band("judge", q)]; },
    margin: function (q) { return [band("margin", q)]; }
  };
  function passes(q, skip) {
    for (var k in tests) {
      if (k !== skip && F[k] && F[k].value && !tests[k](q, F[k].value)) return false;
    }
    return q._m;
  }

  // ---------------------------------------------------------------- list
  var thead = '<tr><th scope="col">idx</th><th scope="col">category</th><th scope="col">video</th><th scope="col">question</th><th scope="col">' +
    (multi ? R.map(function (r, k) { return '<span class="hchip" title="' + esc(r.label) + '">' + (k + 1) + "</span>"; }).join("") : "verdict") + "</th></tr>";
  document.querySelector("#qtable thead").innerHTML = thead;
  var body = document.querySelector("#qtable tbody");
  // Only the first LIMIT rows that pass the filters are in the document (more on demand: the "more" button, scrolling
  // to it, or j/k past the end), so a filter, a sort or clearing them lays out a few hundred rows, not every question.
  var LIMIT = 400, limit = LIMIT, rows = new Array(Q.length), more = $("more");
  function rowHtml(q, n) {
    return '<tr class="qrow" tabindex="-1" data-n="' + n + '" id="row-' + q.i + '"><td>' + q.i + "</td><td>" +
      esc(q.c) + "</td><td>" + esc(q.s) + '</td><td class="q">' + esc(q.q) + "</td><td>" +
      q.r.map(function (a, k) { return chip(a, R[k].label); }).join("") + "</td></tr>";
  }
  function ensure(ns) {  // the rows of these questions, made once
    var need = ns.filter(function (n) { return !rows[n]; });
    if (!need.length) return;
    var t = document.createElement("tbody");
    t.innerHTML = need.map(function (n) { return rowHtml(Q[n], n); }).join("");
    var made = Array.prototype.slice.call(t.rows);
    need.forEach(function (n, i) { rows[n] = made[i]; });
  }
  function render() {
    var ns = shown.slice(0, limit), frag = document.createDocumentFragment();
    ensure(ns);
    ns.forEach(function (n) { frag.appendChild(rows[n]); });
    body.replaceChildren(frag);
    var left = shown.length - ns.length;
    more.hidden = left <= 0;
    more.textContent = "show " + Math.min(LIMIT, left) + " more (" + left + " not listed yet)";
  }
  function grow(upTo) { if (upTo >= limit) { limit = (Math.floor(upTo / LIMIT) + 1) * LIMIT; render(); } }
  more.addEventListener("click", function () { grow(limit); });
  if (window.IntersectionObserver) {
    new IntersectionObserver(function (seen) { if (seen[0].isIntersecting && !more.hidden) grow(limit); },
      {root: $("list"), rootMargin: "400px"}).observe(more);
  }
  document.querySelector("#qtable").style.setProperty("--vw", Math.max(64, R.length * 22 + 14) + "px");
  if (R.length > 4) document.body.classList.add("many");  // the list gets more room and drops the category column (in the detail)
  var order = Q.map(function (q, n) { return n; }), shown = [], current = -1, sortedBy = "i:0";

  function sortKey(q, by) {
    var a = q.r[runK()], v;
    if (by === "x") { v = top(a); return v == null ? Infinity : -v; }
    if (by === "m") { v = margin(a, gOf(q, a)); return v == null ? Infinity : v; }
    if (by === "j") { v = judge(a); return v == null ? Infinity : v; }
    return by === "d" ? D.bins.indexOf(q.d) : by === "i" ? q.i : String(q[by]);
  }
  function resort() {
    var by = F.sort.value, key = by + ":" + (/[xmj]/.test(by) ? runK() : 0);
    if (key === sortedBy) return;
    sortedBy = key;
    var keys = Q.map(function (q) { return sortKey(q, by); });
    order.sort(function (a, b) { var x = keys[a], y = keys[b]; return x < y ? -1 : x > y ? 1 : Q[a].i - Q[b].i; });
  }
  function relabel(name) {  // each option's count under the other filters, in one pass
    if (!F[name]) return;
    var counts = {}, key = keyOf[name];
    Q.forEach(function (q) { if (passes(q, name)) key(q).forEach(function (v) { counts[v] = (counts[v] || 0) + 1; }); });
    Array.prototype.forEach.call(F[name].options, function (opt) {
      if (opt.value) opt.textContent = opt.getAttribute("data-text") + " (" + (counts[opt.value] || 0) + ")";
    });
  }
  function apply() {
    var text = F.text.value.trim().toLowerCase();
    Q.forEach(function (q) { q._m = !text || q._t.indexOf(text) >= 0; });
    shown = order.filter(function (n) { return passes(Q[n], null); });
    limit = LIMIT;
    render();
    Object.keys(keyOf).forEach(relabel);
    $("count").textContent = shown.length + " of " + Q.length + " questions";
    $("count").setAttribute("data-count", shown.length);
    focusable();
  }
  function focusable() {  // one row in the tab order: the open one if shown, else the first shown
    var want = shown.indexOf(current) >= 0 ? current : shown.length ? shown[0] : -1;
    if (want === focusable.at) return;
    if (focusable.at >= 0 && rows[focusable.at]) rows[focusable.at].tabIndex = -1;
    focusable.at = want;
    if (want >= 0) { ensure([want]); rows[want].tabIndex = 0; }
  }
  focusable.at = -1;

  // ---------------------------------------------------------------- state in the URL: #idx&key=value...
  var STATE = ["run", "cat", "verdict", "pair", "a", "b", "judge", "margin", "bin", "video", "text", "sort"];
  var DEFAULTS = {run: "0", a: "0", b: "1", sort: "i"};
  function stateHash() {
    var parts = current >= 0 ? [String(Q[current].i)] : [];
    STATE.forEach(function (k) {
      if (F[k] && F[k].value && F[k].value !== (DEFAULTS[k] || "")) parts.push(k + "=" + encodeURIComponent(F[k].value));
    });
    return parts.length ? "#" + parts.join("&") : "";
  }
  function saveState() {
    var h = stateHash();
    if (location.hash !== h && !(h === "" && location.hash === "")) history.replaceState(null, "", h || location.pathname + location.search);
  }
  function readState() {  // filters and sort from the hash; returns the idx to open (or null)
    var parts = location.hash.slice(1).split("&"), got = {}, idx = null;
    parts.forEach(function (p) {
      if (!p) return;
      var eq = p.indexOf("=");
      if (eq < 0) { if (/^\d+$/.test(p)) idx = +p; return; }
      try { got[p.slice(0, eq)] = decodeURIComponent(p.slice(eq + 1)); } catch (e) { /* a malformed value is left out */ }
    });
    STATE.forEach(function (k) {
      if (!F[k]) return;
      var v = got[k] != null ? got[k] : (DEFAULTS[k] || "");
      if (F[k].tagName === "SELECT" && !Array.prototype.some.call(F[k].options, function (o) { return o.value === v; })) v = DEFAULTS[k] || "";
      F[k].value = v;
    });
    return idx;
  }
  function changed() { resort(); apply(); saveState(); }
  Object.keys(F).forEach(function (k) {
    if (F[k]) F[k].addEventListener(k === "text" ? "input" : "change", changed);
  });
  Array.prototype.forEach.call(document.querySelectorAll(".pairlink"), function (b) {
    b.addEventListener("click", function () {
      F.a.value = String(P.run_k); F.b.value = String(P.base_k); F.pair.value = b.getAttribute("data-pair");
      changed();
      F.pair.focus();
    });
  });

  // ---------------------------------------------------------------- export of the filtered list
  function exported(fmt) {
    var list = shown.map(function (n) { return Q[n]; });  // in the list's order
    if (fmt === "json") {
      return JSON.stringify({runs: R.map(function (r) { return r.label; }), filters: stateHash(), questions: list.map(function (q) {
        return {idx: q.i, video: q.s, category: q.c, question: q.q, ground_truth: q.g, runs: q.r.map(function (a, k) {
          return {run: R[k].label, verdict: a ? a.v : null, answer: a ? a.a : null}; })}; })}, null, 1);
    }
    var cell = function (v) { v = v == null ? "" : String(v); return /[",\n\r]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v; };
    var headRow = ["idx", "video", "category", "question", "ground_truth"];
    R.forEach(function (r) { headRow.push(r.label + " verdict", r.label + " answer"); });
    return [headRow].concat(list.map(function (q) {
      var line = [q.i, q.s, q.c, q.q, q.g];
      q.r.forEach(function (a) { line.push(a ? a.v : "", a ? a.a : ""); });
      return line;
    })).map(function (line) { return line.map(cell).join(","); }).join("\r\n") + "\r\n";
  }
  window.k9export = exported;
  function download(fmt) {
    var blob = new Blob([exported(fmt)], {type: fmt === "json" ? "application/json" : "text/csv"});
    var a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = "k9bench_questions." + fmt;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(function () { URL.revokeObjectURL(a.href); }, 1000);
  }
  $("export-csv").addEventListener("click", function () { download("csv"); });
  $("export-json").addEventListener("click", function () { download("json"); });

  // ---------------------------------------------------------------- detail
  function bars(q, a, r) {
    var thr = r.threshold, g = gOf(q, a);
    return '<table class="opts">' + oOf(q, a).map(function (text, k) {
      var letter = "ABCDE"[k], x = a && a.x ? a.x[k] : null, w = x == null ? 0 : Math.max(0, Math.min(1, x)) * 100;
      var best = a && a.x && x != null && x === top(a);
      return '<tr class="opt' + (letter === g ? " gt" : "") + '"><td class="letter">' + letter + "</td><td>" + esc(text) +
        (letter === g ? '<span class="gttag">GT</span>' : "") + '</td><td><div class="bar" title="cosine similarity ' +
        (x == null ? "n/a" : x.toFixed(3)) + '"><div class="fill' + (best ? " pick" : "") + '" style="width:' + w.toFixed(1) + '%"></div>' +
        (thr != null ? '<div class="thr" style="left:' + (Math.max(0, Math.min(1, thr)) * 100).toFixed(1) + '%" title="threshold ' + esc(thr) + '"></div>' : "") +
        '<span class="val">' + (x == null ? "n/a" : x.toFixed(3)) + "</span></div></td></tr>";
    }).join("") + "</table>";
  }
  function runBlock(q, a, r, k) {
    var name = (k + 1) + ". " + esc(r.label);
    if (!a) return '<div class="run"><b>' + name + "</b>: no answer to this question in this run</div>";
    var m = margin(a, gOf(q, a));
    var out = '<div class="run"><b>' + name + "</b> " + chip(a, r.label) + " <b>" + esc(a.v) + "</b>" +
      (a.p == null ? ' <span class="small">(not compared: ' + (a.v === "none" ? "no verdict" : "no video") + ")</span>" : "") +
      (gvOf(a) ? ' <span class="mark">this run\'s file gives another ground truth or other options for this question: it is compared ' +
        "only with runs whose file gives the same</span>" : "") +
      (a.f ? ' <span class="mark">failure class: ' + esc(a.f) + "</span> <span class=small>" + esc(a.err) + "</span>" : "") +
      "<div>answer: <q>" + esc(a.a) + "</q></div>" + (a.e ? '<div class="small">' + esc(a.e) + "</div>" : "") +
      (m != null ? '<div class="small">similarity margin (GT minus the closest other option): ' + m.toFixed(3) + "</div>" : "") + bars(q, a, r);
    if (a.j) {
      out += '<table class="judge"><tr>' + AXES.map(function (x) { return '<th scope="col">' + x + "</th>"; }).join("") + "</tr><tr>" +
        a.j.map(function (v) { return "<td>" + esc(v) + "</td>"; }).join("") + "</tr></table>" +
        (a.jr ? '<div class="small">judge: ' + esc(a.jr) + "</div>" : "");
    }
    if (a.fl) out += '<div class="small failure-labels">failure labels: ' + esc(a.fl) + "</div>";
    return out + "</div>";
  }
  function strips(q) {
    var list = D.thumbs[q.s] || [];
    if (!list.length) return '<div class="strip"><span class="small">no thumbnails for this video</span></div>';
    return list.map(function (s) {
      var who = s.runs.map(function (k) { return (k + 1) + ". " + R[k].label; }).join(", ");
      return '<div class="strip" role="group" aria-label="frames ' + esc(who) + ' saw"><div class="small strip-runs">frames seen by ' + esc(who) + "</div>" +
        s.f.map(function (t) {
          return '<figure><img class="thumb" src="frames/' + esc(t[0]) + '" alt="frame ' + t[1] + '" loading="lazy"><figcaption>frame ' + t[1] +
            (t[2] != null ? " \u00b7 " + t[2] + " s" : "") + "</figcaption></figure>";
        }).join("") + "</div>";
    }).join("");
  }
  function show(n, scroll) {
    var at = shown.indexOf(n);
    if (at >= 0) grow(at); else ensure([n]);
    if (current >= 0) { rows[current].classList.remove("sel"); rows[current].removeAttribute("aria-current"); }
    current = n;
    var q = Q[n], row = rows[n];
    row.classList.add("sel");
    row.setAttribute("aria-current", "true");
    focusable();
    if (scroll) row.scrollIntoView({block: "nearest"});
    var links = (q.lf ? ' \u00b7 <a href="' + esc(q.lf) + '">open the local file</a>' : "") +
      (q.u ? ' \u00b7 <a href="' + esc(q.u) + '" target="_blank" rel="noopener noreferrer">' + esc(q.u) + "</a>" : "");
    $("detail").innerHTML = "<h2>#" + q.i + " \u00b7 " + esc(q.c) + " \u00b7 " + esc(q.d || "duration unknown") + " \u00b7 " + esc(q.s) +
      ' <button type="button" id="copy-id" title="copy the question id (c)">copy id</button> <span id="copied" role="status"></span></h2>' +
      '<div class="small">local file: <code>' + esc(q.file) + "</code>" + links + "</div>" + strips(q) +
      "<p><b>" + esc(q.q) + "</b></p>" + q.r.map(function (a, k) { return runBlock(q, a, R[k], k); }).join("");
    $("copy-id").addEventListener("click", copyId);
    saveState();
  }
  function copyId() {
    if (current < 0) return;
    var id = String(Q[current].i), say = function (t) { var s = $("copied"); if (s) s.textContent = t; };
    var fallback = function () {
      var box = document.createElement("textarea");
      box.value = id; box.setAttribute("readonly", ""); box.className = "offscreen";
      document.body.appendChild(box); box.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      box.remove();
      say(ok ? "copied " + id : "id " + id + " (copying is not allowed here)");
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(id).then(function () { say("copied " + id); }, fallback);
    } else fallback();
  }
  body.addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr.qrow");
    if (tr) show(+tr.getAttribute("data-n"), false);
  });
  body.addEventListener("keydown", function (ev) {
    var tr = ev.target.closest("tr.qrow");
    if (tr && (ev.key === "Enter" || ev.key === " ")) { show(+tr.getAttribute("data-n"), false); ev.preventDefault(); }
  });
  function step(d) {
    if (!shown.length) return;
    var at = shown.indexOf(current), next = at < 0 ? 0 : Math.max(0, Math.min(shown.length - 1, at + d));
    show(shown[next], true);
    if (document.activeElement && document.activeElement.classList && document.activeElement.classList.contains("qrow")) rows[current].focus();
  }
  function keysHelp(open) {
    var box = $("keys"), btn = $("keys-btn");
    box.hidden = open == null ? !box.hidden : !open;
    btn.setAttribute("aria-expanded", String(!box.hidden));
  }
  $("keys-btn").addEventListener("click", function () { keysHelp(); });
  document.addEventListener("keydown", function (ev) {
    var t = ev.target, tag = t.tagName, typing = tag === "TEXTAREA" || (tag === "INPUT" && t.type !== "checkbox" && t.type !== "button");
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (typing) { if (ev.key === "Escape") t.blur(); return; }
    var arrows = tag !== "SELECT";  // a menu's own arrows move its value
    if (ev.key === "j" || (arrows && ev.key === "ArrowDown")) { step(1); ev.preventDefault(); }
    else if (ev.key === "k" || (arrows && ev.key === "ArrowUp")) { step(-1); ev.preventDefault(); }
    else if (ev.key === "?") { keysHelp(); ev.preventDefault(); }
    else if (ev.key === "Escape") keysHelp(false);
    else if (ev.key === "/") { F.text.focus(); ev.preventDefault(); }
    else if (ev.key === "c" && current >= 0) copyId();
  });
  function fromHash() {
    var idx = readState();
    resort(); apply();
    if (idx == null) return;
    for (var n = 0; n < Q.length; n++) if (Q[n].i === idx) { if (n !== current) show(n, true); return; }
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
  T.applied = T.rows = T.complete = performance.now();
  T.ready = performance.now();
  document.body.setAttribute("data-ready", "1");
  document.body.setAttribute("data-complete", "1");
})();
