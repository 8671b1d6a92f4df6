// The dashboard's script: refreshes the live part every second, and sends the
// actions (retry) with the access token. No library, no build step.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var msg = document.getElementById("msg");
  var updated = document.getElementById("updated");
  var tokenField = document.getElementById("token");
  var EVERY = 1000;
  var busy = false;

  if (tokenField) {
    tokenField.value = sessionStorage.getItem("liveness-token") || "";
    tokenField.addEventListener("input", function () {
      sessionStorage.setItem("liveness-token", tokenField.value);
    });
  }

  function say(text, bad) {
    msg.textContent = text;
    msg.className = bad ? "bad" : "ok";
  }

  function refresh() {
    if (busy) return;
    busy = true;
    fetch("parts" + location.search, { cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        updated.textContent = "updated " + new Date().toLocaleTimeString();
        updated.className = "";
      })
      .catch(function (e) {
        updated.textContent = "the dashboard does not answer (" + e.message + ")";
        updated.className = "bad";
      })
      .then(function () { busy = false; });
  }

  function act(path, what) {
    var headers = { "X-Liveness-Token": tokenField ? tokenField.value : "" };
    say(what + "…", false);
    fetch(path, { method: "POST", headers: headers, credentials: "same-origin" })
      .then(function (r) {
        return r.text().then(function (text) {
          say(text.trim() || ("HTTP " + r.status), !r.ok);
          refresh();
        });
      })
      .catch(function (e) { say(what + " failed: " + e.message, true); });
  }

  live.addEventListener("click", function (ev) {
    var t = ev.target;
    if (t.matches("button.retry")) {
      act("actions/retry/" + t.getAttribute("data-id"), "retrying item " + t.getAttribute("data-id"));
    } else if (t.matches("button.cancel")) {
      var id = t.getAttribute("data-id"), what = t.getAttribute("data-what");
      // Removing an item cannot be undone: ask first.
      if (window.confirm(what + " item " + id + "? It is removed for good.")) {
        act("actions/cancel/" + id, (what === "discard" ? "discarding" : "cancelling") + " item " + id);
      }
    } else if (t.id === "retry-all") {
      act("actions/retry-all", "retrying every dead letter");
    }
  });

  setInterval(refresh, EVERY);
})();
