// aicenter console: a little progressive enhancement. Every page works without it.
(function () {
  "use strict";

  // Forms with data-confirm ask before they submit (delete, revoke, freeze, drain...).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  });

  // Selects with data-autosubmit submit their form on change (the workspace switcher).
  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el instanceof HTMLSelectElement && el.hasAttribute("data-autosubmit") && el.form) {
      el.form.submit();
    }
  });

  function copyText(text) {
    // navigator.clipboard needs a secure context (https or localhost); fall back to a hidden textarea.
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.style.position = "fixed";
      area.style.opacity = "0";
      document.body.appendChild(area);
      area.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      document.body.removeChild(area);
      if (ok) { resolve(); } else { reject(new Error("copy failed")); }
    });
  }

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!(target instanceof Element)) { return; }
    var copy = target.closest("[data-copy-target]");
    if (copy) {
      var source = document.getElementById(copy.getAttribute("data-copy-target"));
      if (!source) { return; }
      var label = copy.textContent;
      copyText(source.textContent.trim()).then(function () {
        copy.textContent = "Copied";
        copy.setAttribute("data-copied", "true");
      }, function () {
        copy.textContent = "Select and copy";
      });
      window.setTimeout(function () { copy.textContent = label; }, 2500);
      return;
    }
    var dismiss = target.closest("[data-dismiss]");
    if (dismiss && dismiss.parentElement) {
      dismiss.parentElement.remove();
    }
  });
})();
