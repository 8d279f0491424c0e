// What the console's templates ask of a page with data-* attributes, since the Content-Security-Policy
// (SECURE_CSP in appliance/settings.py) runs no inline script, event handler or style attribute:
// - form[data-confirm]: submitting it asks first (window.confirm) with the attribute's text; "Cancel" stops it.
// - [data-width]: the element's width, a percentage (0-100), set through the CSSOM, which the policy allows.
// Applied to the page once it is parsed and to every fragment htmx swaps in (its htmx:load event).
(() => {
  document.addEventListener(
    "submit",
    (event) => {
      const form = event.target;
      if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
        event.preventDefault();
        event.stopImmediatePropagation();
      }
    },
    true,
  );

  const widths = (root) => {
    const found = [...root.querySelectorAll("[data-width]")];
    if (root instanceof Element && root.matches("[data-width]")) found.push(root);
    for (const el of found) el.style.width = `${Number(el.dataset.width) || 0}%`;
  };
  document.addEventListener("DOMContentLoaded", () => widths(document));
  document.addEventListener("htmx:load", (event) => widths(event.target));
})();
