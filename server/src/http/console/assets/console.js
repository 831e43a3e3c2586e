// The audit page's live stream: events from the console's stream route (the API's
// streamAuditEvents, as the signed-in token) are added to the top of the table as they arrive.
"use strict";
(function () {
  var body = document.getElementById("events");
  if (!body || !window.EventSource) return;
  var source = new EventSource(body.getAttribute("data-stream"));
  var status = document.getElementById("stream-status");
  function say(text) { if (status) status.textContent = text; }
  source.onopen = function () { say("Live: new events appear as they are written."); };
  source.onerror = function () { say("Reconnecting…"); };
  function cell(row, text) { var td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
  function add(event) {
    var data;
    try { data = JSON.parse(event.data); } catch (e) { return; }
    var row = document.createElement("tr");
    var actor = data.actor || {};
    cell(row, String(data.sequence != null ? data.sequence : event.lastEventId));
    cell(row, data.occurredAt || "");
    cell(row, data.type || "");
    cell(row, actor.kind ? actor.kind + (actor.id ? " " + actor.id : "") : "");
    cell(row, data.correlationId || "");
    body.insertBefore(row, body.firstChild);
    while (body.rows.length > 500) body.deleteRow(body.rows.length - 1);
  }
  // The console's stream route sends every event unnamed (as "message").
  source.onmessage = add;
})();
