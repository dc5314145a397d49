// The status page's only script: it follows the page's event stream (server-rendered,
// escaped HTML of the live part) and keeps the ages current. EventSource reconnects by
// itself; every (re)connection starts with the whole current state, so nothing is missed.
(function () {
  "use strict";
  function age(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) return Math.floor(s / 3600) + "h";
    return Math.floor(s / 86400) + "d";
  }
  function ages() {
    var now = Date.now();
    document.querySelectorAll("[data-ts]").forEach(function (el) {
      var ts = Number(el.getAttribute("data-ts"));
      if (el.hasAttribute("data-future")) {
        el.textContent = ts <= now ? "due" : "in " + age(ts - now);
      } else {
        el.textContent = age(now - ts);
      }
    });
  }
  function follow(live) {
    var conn = document.getElementById("conn");
    var say = function (t) { if (conn) conn.textContent = t; };
    var source = new EventSource(live.getAttribute("data-events"));
    // An update waits while someone is at a decide form (focus in it, or a note typed), so
    // a press or a note is never swept away; it is shown once they leave the form.
    var held = null;
    var busy = function () {
      var a = document.activeElement;
      if (a && live.contains(a) && a.closest && a.closest("form.decide")) return true;
      var notes = live.querySelectorAll("form.decide .note");
      for (var i = 0; i < notes.length; i++) if (notes[i].value) return true;
      return false;
    };
    var show = function (html) {
      live.innerHTML = html;
      ages();
    };
    live.addEventListener("focusout", function () {
      setTimeout(function () {
        if (held !== null && !busy()) { show(held); held = null; }
      }, 0);
    });
    source.addEventListener("update", function (e) {
      var data = JSON.parse(e.data);
      if (busy()) { held = data.html; } else { held = null; show(data.html); }
      say("live");
    });
    source.onopen = function () { say("live"); };
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) {
        // Refused (signed out, session over) or gone: look again in a while.
        say("disconnected; retrying");
        setTimeout(function () { window.location.reload(); }, 5000);
      } else {
        say("reconnecting…");
      }
    };
  }
  document.addEventListener("DOMContentLoaded", function () {
    var live = document.getElementById("live");
    if (live && window.EventSource) follow(live);
    setInterval(ages, 1000);
  });
})();
