// Live preview of the next instants on the create and edit forms: asks the
// console (same origin, the session cookie) what the api's schedule engine
// makes of the schedule's fields as they are typed — any kind, its bounds,
// DST policies and calendar. It also shows only the chosen kind's field.
// The form works without it: every field is then shown, and the api's
// errors come back beside their fields when the form is sent.
(function () {
  "use strict";
  var out = document.getElementById("preview");
  var box = document.getElementById("schedule");
  if (!out || !box) { return; }
  var names = ["cron", "once", "interval", "rrule", "timezone", "start_time", "end_time",
    "dst_gap", "dst_repeat", "calendar", "calendar_policy"];
  var timer = null;
  var seq = 0;
  function kind() {
    var k = box.querySelector("input[name=schedule_kind]:checked");
    return k ? k.value : "cron";
  }
  function showKind() {
    var k = kind();
    Array.prototype.forEach.call(box.querySelectorAll("[data-kind]"), function (el) {
      el.hidden = el.getAttribute("data-kind") !== k;
    });
  }
  function show(lines, isError) {
    while (out.firstChild) { out.removeChild(out.firstChild); }
    lines.forEach(function (line) {
      var li = document.createElement("li");
      li.textContent = line;
      if (isError) { li.className = "field-error"; }
      out.appendChild(li);
    });
  }
  function update() {
    var mine = ++seq;
    var k = kind();
    var spec = document.getElementById(k);
    if (!spec || spec.value.trim() === "") { show([], false); return; }
    var q = "schedule_kind=" + encodeURIComponent(k);
    names.forEach(function (n) {
      var el = document.getElementById(n);
      if (el) { q += "&" + n + "=" + encodeURIComponent(el.value); }
    });
    fetch("/preview?" + q, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (p) {
        if (mine !== seq) { return; } // a newer keystroke won
        if (p.error) { show([p.error], true); return; }
        show([p.description].concat(p.times, p.adjustments || []), false);
      })
      .catch(function () { /* the preview is a help, not a requirement */ });
  }
  function later() { clearTimeout(timer); timer = setTimeout(update, 250); }
  box.addEventListener("input", later);
  box.addEventListener("change", function () { showKind(); later(); });
  showKind();
  update();
}());
