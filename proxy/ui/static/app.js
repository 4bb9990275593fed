// The inspector's only script: copy buttons, keyboard shortcuts, live refresh, elided parts. No inline code
// (the Content-Security-Policy forbids it) and nothing fetched but this proxy's own /ui pages.
"use strict";

function bindCopy(root) {
  root.querySelectorAll("[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      var input = document.getElementById(button.getAttribute("data-copy"));
      if (!input) return;
      input.select();
      var done = function () { button.textContent = "Copied"; };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(input.value).then(done, function () { document.execCommand("copy"); done(); });
      } else {
        document.execCommand("copy");
        done();
      }
    });
  });
}

// j / k: next / previous row link of the page's first table; "/": the first search field.
document.addEventListener("keydown", function (event) {
  var target = event.target;
  if (target && (target.tagName === "INPUT" || target.tagName === "SELECT" || target.tagName === "TEXTAREA")) return;
  if (event.key === "/") {
    var field = document.querySelector("form.search input:not([type=hidden])");
    if (field) { event.preventDefault(); field.focus(); }
    return;
  }
  if (event.key !== "j" && event.key !== "k") return;
  var links = Array.prototype.slice.call(document.querySelectorAll("main table tbody tr td:first-child a, main table tbody a.diff"));
  if (!links.length) return;
  var at = links.indexOf(document.activeElement);
  var next = event.key === "j" ? Math.min(at + 1, links.length - 1) : Math.max(at - 1, 0);
  links[next].focus();
  event.preventDefault();
});

// Live view: poll the page's JSON; when it changes, fetch the page again and swap <main>.
function live() {
  var main = document.getElementById("main");
  var url = main && main.getAttribute("data-live");
  if (!url) return;
  var last = null;
  function tick() {
    if (document.hidden || (document.activeElement && document.activeElement.tagName === "INPUT")) return;
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text === null) return;
        if (last !== null && text !== last) refresh();
        last = text;
      })
      .catch(function () {});
  }
  function refresh() {
    fetch(location.href, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
        if (!fresh) return;
        main.innerHTML = fresh.innerHTML;
        main.setAttribute("data-refreshed", String(Date.now()));
        bindCopy(main);
      })
      .catch(function () {});
  }
  tick();
  setInterval(tick, 2000);
}

// A trimmed result's "Show the elided parts": opening it loads the stored original once (the
// call's JSON at data-src) and shows it, each elided run in a <mark class="elided">. Text goes in
// as text nodes, never as HTML. Delegated from the document: live refresh swaps <main>.
document.addEventListener("toggle", function (event) {
  var details = event.target;
  if (!details || !details.matches || !details.matches("details.elided[data-src]")) return;
  if (!details.open || details.getAttribute("data-loaded")) return;
  details.setAttribute("data-loaded", "loading");
  var pre = details.querySelector("pre.original");
  fetch(details.getAttribute("data-src"), { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then(function (response) { return response.ok ? response.json() : null; })
    .then(function (body) {
      if (!body || !pre) { details.setAttribute("data-loaded", "failed"); return; }
      pre.textContent = "";
      body.segments.forEach(function (part) {
        if (part.elided) {
          var mark = document.createElement("mark");
          mark.className = "elided";
          mark.textContent = part.text;
          pre.appendChild(mark);
        } else {
          pre.appendChild(document.createTextNode(part.text));
        }
      });
      details.setAttribute("data-loaded", "done");
    })
    .catch(function () { details.setAttribute("data-loaded", "failed"); });
}, true);

bindCopy(document);
live();
