// The overview's live updates, by polling: every data-refresh seconds the
// page fetches itself (the same server-rendered HTML, so the figures are
// drawn once, on the server) and swaps in its #live part. An update waits
// while the keyboard focus is inside #live, so a keyboard user's place is
// never lost, and the button pauses them altogether. Without this script
// the page reloads itself (<noscript> refresh).
(function () {
  'use strict';
  var live = document.getElementById('live');
  var toggle = document.getElementById('live-toggle');
  if (!live || !toggle || !window.fetch || !window.DOMParser) return;
  var every = Number(live.getAttribute('data-refresh')) * 1000;
  if (!(every > 0)) return;
  var paused = false;
  var busy = false;
  toggle.hidden = false;
  toggle.addEventListener('click', function () {
    paused = !paused;
    toggle.textContent = paused ? 'Resume live updates' : 'Pause live updates';
    toggle.setAttribute('aria-pressed', paused ? 'true' : 'false');
  });
  toggle.setAttribute('aria-pressed', 'false');

  function say(text) {
    var as = document.getElementById('as-of');
    if (as) as.textContent = text;
  }

  function update() {
    if (paused || busy || document.hidden || live.contains(document.activeElement)) return;
    busy = true;
    fetch(location.pathname + location.search, { credentials: 'same-origin', cache: 'no-store' })
      .then(function (r) {
        // A session that ended lands on the sign-in page.
        if (r.redirected && new URL(r.url).pathname === '/login') throw new Error('signed out: reload the page to sign in');
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, 'text/html').getElementById('live');
        if (!fresh) throw new Error('the answer has no overview');
        if (live.contains(document.activeElement)) return; // focus came in meanwhile
        // Keep open what the reader opened (every minute's table).
        var open = Array.prototype.map.call(live.querySelectorAll('details'), function (d) { return d.open; });
        var nodes = Array.prototype.map.call(fresh.childNodes, function (n) { return document.importNode(n, true); });
        live.replaceChildren.apply(live, nodes);
        Array.prototype.forEach.call(live.querySelectorAll('details'), function (d, i) { if (open[i]) d.open = true; });
        live.setAttribute('data-updates', String(Number(live.getAttribute('data-updates')) + 1));
      })
      .catch(function (err) {
        say('Live updates failed (' + err.message + '); the figures below are from the last good one.');
      })
      .finally(function () { busy = false; });
  }
  setInterval(update, every);
})();
