"use strict";
(function () {
  var T = window.k9timings = {start: performance.now()};
  var D = JSON.parse(document.getElementById("k9data").textContent);
  T.parsed = performance.now();
  var Q = D.questions, R = D.runs, multi = R.length > 1;
  var $ = function (id) { return document.getElementById(id); };
  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function pct(v) { return v == null ? "n/a" : v.toFixed(1) + "%"; }
  function kb(n) { return n < 1048576 ? (n / 1024).toFixed(0) + " KB" : (n / 1048576).toFixed(1) + " MB"; }
  function chip(a, title) {
    var v = a ? a.v : "none", t = {correct: "\u2713", wrong: "\u2717", failed: "F", none: "\u2013"}[v];
    return '<span class="chip v-' + v + '" title="' + esc(title || "") + " " + v + '">' + t + "</span>";
  }
  function disagree(q) {
    var seen = {};
    q.r.forEach(function (a) { if (a) seen[a.v === "correct" ? "c" : "w"] = 1; });
    return Object.keys(seen).length > 1;
  }
  Q.forEach(function (q) {
    q._t = (q.i + " " + q.c + " " + q.s + " " + q.q + " " + q.o.join(" ") + " " +
      q.r.map(function (a) { return a ? a.a + " " + (a.e || "") + " " + (a.f || "") : ""; }).join(" ")).toLowerCase();
    q._x = q.r[0] && q.r[0].x ? Math.max.apply(null, q.r[0].x.map(function (v) { return v == null ? -1 : v; })) : -1;
    q._dis = multi && disagree(q);
  });

  // ---------------------------------------------------------------- header
  var notes = D.notes.map(function (n) { return '<div class="note">' + esc(n) + "</div>"; }).join("");
  R.forEach(function (r) {
    if (r.mark) notes += '<div class="note">' + esc(r.label) + ": " + esc(r.mark) + " (" + esc(r.differences.join("; ")) + ")</div>";
  });
  $("notes").innerHTML = notes;
  var few = R.length <= 3;
  var head = "<details" + (few ? " open" : "") + "><summary><b>" + R.length + " run" + (few && R.length === 1 ? "" : "s") +
    "</b>: accuracy, standing against the paper, settings</summary><table><tr><th>run</th><th>file</th><th>accuracy</th><th>failed</th><th>standing</th><th>settings</th></tr>";
  R.forEach(function (r, k) {
    var n = 0, ok = 0, failed = 0, judged = 0;
    Q.forEach(function (q) {
      var a = q.r[k];
      if (a) { n++; if (a.v === "correct") ok++; if (a.v === "failed") failed++; if (a.v === "correct" || a.v === "wrong") judged++; }
    });
    var sets = r.rows.map(function (x) { return esc(x[0]) + ": " + esc(x[1]); }).join("<br>");
    if (r.unconfirmed.length) sets += "<br>unconfirmed: " + esc(r.unconfirmed.join("; "));
    head += "<tr><td><b>" + esc(r.label) + "</b></td><td class=small>" + esc(r.path) + (r.judge ? "<br>judge: " + esc(r.judge) : "") +
      "</td><td>" + (judged ? pct(n ? 100 * ok / n : null) + " (" + ok + "/" + n + ")" : "no verdicts (" + esc(r.stage) + " file)") +
      "</td><td>" + failed + "</td><td" + (r.mark ? ' class="mark"' : "") + ">" + esc(r.standing) +
      "</td><td><details><summary>settings</summary>" + sets + "</details></td></tr>";
  });
  head += "</table></details>";
  var thumbs = Object.keys(D.thumbs).length;
  head += '<div class="small">frames/ folder: ' + kb(D.frames_bytes) + " for " + thumbs + " video(s)" +
    (D.thumb_notes.length ? "; " + esc(D.thumb_notes.join("; ")) : "") +
    ". Keys: <kbd>j</kbd>/<kbd>\u2193</kbd> next, <kbd>k</kbd>/<kbd>\u2191</kbd> previous question.</div>";
  $("runs").innerHTML = head;
  var across = "";
  if (D.across) {
    var A = D.across;
    across += "<details" + (few ? " open" : "") + "><summary><b>Across runs</b>: " + A.common + " common questions (those whose video every run had)</summary>";
    across += '<h2>Agreement (share of common questions with the same verdict)</h2><table class="matrix"><tr><th></th>' +
      R.map(function (r) { return "<th>" + esc(r.label) + "</th>"; }).join("") + "</tr>";
    A.agreement.forEach(function (row, k) {
      across += "<tr><th>" + esc(R[k].label) + "</th>" + row.map(function (v) { return "<td>" + pct(v) + "</td>"; }).join("") + "</tr>";
    });
    across += '</table><h2>Accuracy per category, common questions only</h2><table class="matrix"><tr><th>run</th>' +
      D.categories.map(function (c) { return "<th>" + esc(c) + "</th>"; }).join("") + "<th>overall</th></tr>";
    A.by_category.forEach(function (line, k) {
      across += "<tr><th>" + esc(R[k].label) + "</th>" + D.categories.concat(["overall"]).map(function (c) {
        return "<td>" + pct(line[c]) + "</td>"; }).join("") + "</tr>";
    });
    across += "</table></details>";
  }
  if (D.paired) {
    across += '<details open id="paired"><summary><b>Paired comparison</b></summary><table>' + Object.keys(D.paired).map(function (k) {
      var v = D.paired[k];
      return "<tr><th>" + esc(k) + "</th><td>" + esc(typeof v === "object" ? JSON.stringify(v) : v) + "</td></tr>";
    }).join("") + "</table></details>";
  }
  $("across").innerHTML = across;

  // ---------------------------------------------------------------- filters
  var videos = [], vseen = {};
  Q.forEach(function (q) { if (!vseen[q.s]) { vseen[q.s] = 1; videos.push(q.s); } });
  function sel(id, label, values) {
    return "<label>" + label + ' <select id="' + id + '"><option value="">all</option>' + values.map(function (v) {
      return '<option value="' + esc(v) + '">' + esc(v) + "</option>"; }).join("") + "</select></label>";
  }
  var verdicts = ["correct", "wrong", "failed"];
  if (multi) verdicts.push("disagree");
  $("filters").innerHTML = sel("f-cat", "category", D.categories) + sel("f-verdict", "verdict", verdicts) +
    (multi ? '<label>of <select id="f-run">' + R.map(function (r, k) { return '<option value="' + k + '">' + esc(r.label) + "</option>"; }).join("") +
      "</select></label>" : "") +
    sel("f-bin", "duration", D.bins) + sel("f-video", "video", videos) +
    '<label>text <input id="f-text" type="search" size="16" placeholder="search"></label>' +
    '<label>sort <select id="f-sort"><option value="i">idx</option><option value="c">category</option><option value="s">video</option>' +
    '<option value="d">duration</option><option value="x">top similarity</option></select></label><span id="count"></span>';
  var F = {cat: $("f-cat"), verdict: $("f-verdict"), bin: $("f-bin"), video: $("f-video"), text: $("f-text"), sort: $("f-sort"), run: $("f-run")};
  var tests = {
    cat: function (q, v) { return q.c === v; },
    bin: function (q, v) { return q.d === v; },
    video: function (q, v) { return q.s === v; },
    verdict: function (q, v) {
      if (v === "disagree") return q._dis;
      var a = q.r[F.run ? +F.run.value : 0];
      return !!a && a.v === v;
    }
  };
  function passes(q, skip) {
    for (var k in tests) {
      if (k !== skip && F[k].value && !tests[k](q, F[k].value)) return false;
    }
    return q._m;
  }
  var keyOf = {
    cat: function (q) { return [q.c]; },
    bin: function (q) { return [q.d]; },
    verdict: function (q) { var a = q.r[F.run ? +F.run.value : 0], out = a ? [a.v] : []; if (q._dis) out.push("disagree"); return out; }
  };

  // ---------------------------------------------------------------- list
  var thead = "<tr><th>idx</th><th>category</th><th>video</th><th>question</th><th>" +
    (multi ? R.map(function (r, k) { return '<span class="hchip" title="' + esc(r.label) + '">' + (k + 1) + "</span>"; }).join("") : "verdict") + "</th></tr>";
  document.querySelector("#qtable thead").innerHTML = thead;
  var body = document.querySelector("#qtable tbody");
  // rows are drawn in chunks: the first screenful at once, the rest while the page is already usable
  var CHUNK = 300, rows = new Array(Q.length), drawn = 0, hiddenNow = {};
  function rowHtml(q, n) {
    return '<tr class="qrow" data-n="' + n + '" id="row-' + q.i + '"' + (hiddenNow[n] ? " hidden" : "") + "><td>" + q.i + "</td><td>" +
      esc(q.c) + "</td><td>" + esc(q.s) + '</td><td class="q">' + esc(q.q) + "</td><td>" +
      q.r.map(function (a, k) { return chip(a, R[k].label); }).join("") + "</td></tr>";
  }
  function draw(count) {
    var end = Math.min(Q.length, drawn + count), html = "";
    for (var n = drawn; n < end; n++) html += rowHtml(Q[n], n);
    body.insertAdjacentHTML("beforeend", html);
    for (n = drawn; n < end; n++) rows[n] = body.rows[n];
    drawn = end;
    if (drawn === Q.length) { T.complete = performance.now(); document.body.setAttribute("data-complete", "1"); }
  }
  function drawAll() { if (drawn < Q.length) draw(Q.length); }
  function drawMore() { if (drawn < Q.length) { draw(CHUNK * 4); setTimeout(drawMore, 0); } }
  document.querySelector("#qtable").style.setProperty("--vw", Math.max(64, R.length * 20 + 14) + "px");
  draw(CHUNK);
  T.rows = performance.now();
  var order = Q.map(function (q, n) { return n; }), shown = order.slice(), current = -1;

  function sortKey(q, by) {
    return by === "x" ? -q._x : by === "d" ? D.bins.indexOf(q.d) : by === "i" ? q.i : String(q[by]);
  }
  function resort() {
    var by = F.sort.value;
    drawAll();
    order.sort(function (a, b) {
      var x = sortKey(Q[a], by), y = sortKey(Q[b], by);
      return x < y ? -1 : x > y ? 1 : Q[a].i - Q[b].i;
    });
    var frag = document.createDocumentFragment();
    order.forEach(function (n) { frag.appendChild(rows[n]); });
    body.appendChild(frag);
  }
  function relabel(name) {  // each option's count under the other filters, in one pass
    var counts = {}, key = keyOf[name];
    Q.forEach(function (q) { if (passes(q, name)) key(q).forEach(function (v) { counts[v] = (counts[v] || 0) + 1; }); });
    Array.prototype.forEach.call(F[name].options, function (opt) {
      if (opt.value) opt.textContent = opt.value + " (" + (counts[opt.value] || 0) + ")";
    });
  }
  function apply() {
    var text = F.text.value.trim().toLowerCase();
    Q.forEach(function (q) { q._m = !text || q._t.indexOf(text) >= 0; });
    shown = [];
    order.forEach(function (n) {
      var ok = passes(Q[n], null);
      if (n < drawn) rows[n].hidden = !ok; else hiddenNow[n] = !ok;
      if (ok) shown.push(n);
    });
    ["cat", "verdict", "bin"].forEach(function (name) { relabel(name); });
    $("count").textContent = shown.length + " of " + Q.length + " questions";
    $("count").setAttribute("data-count", shown.length);
  }
  Object.keys(F).forEach(function (k) {
    if (!F[k]) return;
    F[k].addEventListener(k === "text" ? "input" : "change", function () { if (k === "sort") resort(); apply(); });
  });

  // ---------------------------------------------------------------- detail
  function bars(q, a, r) {
    var thr = r.threshold;
    return '<table class="opts">' + q.o.map(function (text, k) {
      var letter = "ABCDE"[k], x = a && a.x ? a.x[k] : null, w = x == null ? 0 : Math.max(0, Math.min(1, x)) * 100;
      var best = a && a.x && x != null && x === Math.max.apply(null, a.x.map(function (v) { return v == null ? -1 : v; }));
      return '<tr class="opt' + (letter === q.g ? " gt" : "") + '"><td class="letter">' + letter + "</td><td>" + esc(text) +
        (letter === q.g ? '<span class="gttag">GT</span>' : "") + '</td><td><div class="bar" title="cosine similarity ' +
        (x == null ? "n/a" : x.toFixed(3)) + '"><div class="fill' + (best ? " pick" : "") + '" style="width:' + w.toFixed(1) + '%"></div>' +
        (thr != null ? '<div class="thr" style="left:' + (Math.max(0, Math.min(1, thr)) * 100).toFixed(1) + '%" title="threshold ' + thr + '"></div>' : "") +
        '<span class="val">' + (x == null ? "n/a" : x.toFixed(3)) + "</span></div></td></tr>";
    }).join("") + "</table>";
  }
  var AXES = ["Logic", "Factuality", "Accuracy", "Conciseness", "Overall"];
  function runBlock(q, a, r) {
    if (!a) return '<div class="run"><b>' + esc(r.label) + "</b>: no answer to this question in this run</div>";
    var out = '<div class="run"><b>' + esc(r.label) + "</b> " + chip(a, r.label) + " <b>" + esc(a.v) + "</b>" +
      (a.f ? ' <span class="mark">failure class: ' + esc(a.f) + "</span> <span class=small>" + esc(a.err) + "</span>" : "") +
      "<div>answer: <q>" + esc(a.a) + "</q></div>" + (a.e ? '<div class="small">' + esc(a.e) + "</div>" : "") + bars(q, a, r);
    if (a.j) {
      out += '<table class="judge"><tr>' + AXES.map(function (x) { return "<th>" + x + "</th>"; }).join("") + "</tr><tr>" +
        a.j.map(function (v) { return "<td>" + esc(v) + "</td>"; }).join("") + "</tr></table>" +
        (a.jr ? '<div class="small">judge: ' + esc(a.jr) + "</div>" : "");
    }
    if (a.fl) out += '<div class="small failure-labels">failure labels: ' + esc(a.fl) + "</div>";
    return out + "</div>";
  }
  function show(n, scroll) {
    if (n >= drawn) drawAll();
    if (current >= 0) rows[current].classList.remove("sel");
    current = n;
    var q = Q[n], row = rows[n];
    row.classList.add("sel");
    if (scroll) row.scrollIntoView({block: "nearest"});
    var strip = (D.thumbs[q.s] || []).map(function (t) {
      return '<figure><img class="thumb" src="frames/' + esc(t[0]) + '" alt="frame ' + t[1] + '" loading="lazy"><figcaption>frame ' + t[1] +
        (t[2] != null ? " \u00b7 " + t[2] + " s" : "") + "</figcaption></figure>";
    }).join("");
    $("detail").innerHTML = "<h2>#" + q.i + " \u00b7 " + esc(q.c) + " \u00b7 " + esc(q.d || "duration unknown") + " \u00b7 " + esc(q.s) + "</h2>" +
      '<div class="small">local file: <code>' + esc(q.file) + "</code>" + (q.u ? ' \u00b7 <a href="' + esc(q.u) + '" target="_blank" rel="noopener">' + esc(q.u) + "</a>" : "") + "</div>" +
      '<div class="strip">' + (strip || '<span class="small">no thumbnails for this video</span>') + "</div>" +
      "<p><b>" + esc(q.q) + "</b></p>" + q.r.map(function (a, k) { return runBlock(q, a, R[k]); }).join("");
    if (location.hash !== "#" + q.i) history.replaceState(null, "", "#" + q.i);
  }
  body.addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr.qrow");
    if (tr) show(+tr.getAttribute("data-n"), false);
  });
  function step(d) {
    if (!shown.length) return;
    var at = shown.indexOf(current), next = at < 0 ? 0 : Math.max(0, Math.min(shown.length - 1, at + d));
    show(shown[next], true);
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === "j" || ev.key === "ArrowDown") { step(1); ev.preventDefault(); }
    else if (ev.key === "k" || ev.key === "ArrowUp") { step(-1); ev.preventDefault(); }
  });
  function fromHash() {
    var idx = parseInt(location.hash.slice(1), 10);
    for (var n = 0; n < Q.length; n++) if (Q[n].i === idx) { if (n !== current) show(n, true); return; }
  }
  window.addEventListener("hashchange", fromHash);
  apply();
  T.applied = performance.now();
  fromHash();
  T.ready = performance.now();
  document.body.setAttribute("data-ready", "1");
  window.addEventListener("load", function () { setTimeout(drawMore, 0); });
})();
