// Live preview of the next instants on the create and edit forms: asks the
// console (same origin, the session cookie) what the api's schedule engine
// makes of the cron and time zone as they are typed. The form works
// without it.
(function () {
  "use strict";
  var cron = document.getElementById("cron");
  var tz = document.getElementById("timezone");
  var out = document.getElementById("preview");
  if (!cron || !tz || !out) { return; }
  var timer = null;
  var seq = 0;
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
    if (cron.value.trim() === "") { show([], false); return; }
    var q = "cron=" + encodeURIComponent(cron.value) + "&timezone=" + encodeURIComponent(tz.value);
    fetch("/preview?" + q, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (p) {
        if (mine !== seq) { return; } // a newer keystroke won
        if (p.error) { show([p.error], true); return; }
        show([p.description].concat(p.times), false);
      })
      .catch(function () { /* the preview is a help, not a requirement */ });
  }
  function later() { clearTimeout(timer); timer = setTimeout(update, 250); }
  cron.addEventListener("input", later);
  tz.addEventListener("input", later);
  update();
}());
