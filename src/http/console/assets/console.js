// abstore console: live growth of an event timeline. One held read at a
// time per open page (GET /console/live/...?after=N&wait=...), answered as
// soon as an event past N exists; rows arrive already rendered by the
// server's templates (escaped there) and are appended as they are.
"use strict";
(function () {
  var events = document.querySelector("[data-events][data-live]");
  if (!events) { return; }
  var source = events.getAttribute("data-live");
  var status = document.querySelector("[data-live-status]");
  var failures = 0;
  function say(text) { if (status) { status.textContent = text; } }
  function lastSeq() {
    var rows = events.querySelectorAll("[data-seq]");
    if (rows.length === 0) { return Number(events.getAttribute("data-after") || "0"); }
    return Number(rows[rows.length - 1].getAttribute("data-seq"));
  }
  function next() {
    var url = source + "?after=" + encodeURIComponent(String(lastSeq()));
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) {
        if (response.status === 401 || response.status === 404) { throw new Error("stop"); }
        if (!response.ok) { throw new Error("status " + response.status); }
        return response.json();
      })
      .then(function (answer) {
        failures = 0;
        if (answer.html) {
          var body = events.tBodies ? events.tBodies[0] : events;
          body.insertAdjacentHTML("beforeend", answer.html);
        }
        say(answer.more ? "more events: follow the next page" : "live");
        if (answer.more) { return; }
        next();
      })
      .catch(function (error) {
        if (String(error && error.message) === "stop") { say("not live: sign in again"); return; }
        failures += 1;
        say("reconnecting");
        setTimeout(next, Math.min(30000, 1000 * Math.pow(2, failures)));
      });
  }
  say("live");
  next();
})();
