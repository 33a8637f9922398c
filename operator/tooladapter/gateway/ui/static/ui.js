// Live updates of the reviewers' page: the server sends an event when a call in the
// person's namespaces changes; the list is fetched again (same origin, same cookie)
// unless the person is typing in a form of it, then a notice asks for a reload.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource || !live.dataset.events) {
    return;
  }
  var stale = document.getElementById("stale");
  var timer = null;

  function typing() {
    var fields = live.querySelectorAll("textarea, input[type=text], select, input[type=radio]");
    for (var i = 0; i < fields.length; i++) {
      var field = fields[i];
      if (field === document.activeElement) {
        return true;
      }
      if (field.tagName === "TEXTAREA" && field.value) {
        return true;
      }
      if (field.type === "radio" && field.checked) {
        return true;
      }
    }
    return false;
  }

  function refresh() {
    timer = null;
    if (typing()) {
      if (stale) {
        stale.hidden = false;
      }
      return;
    }
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    fetch(url.toString(), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        // The person may have started typing while the list was on its way: keep what
        // they typed and ask for a reload instead.
        if (typing()) {
          if (stale) {
            stale.hidden = false;
          }
        } else {
          live.innerHTML = html;
          live.dataset.updates = String(Number(live.dataset.updates || "0") + 1);
        }
      })
      .catch(function () {});
  }

  var source = new EventSource(live.dataset.events);
  source.addEventListener("change", function () {
    if (timer === null) {
      timer = window.setTimeout(refresh, 200);
    }
  });
})();
