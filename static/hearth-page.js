// What the console's templates ask of a page with data-* attributes, since the Content-Security-Policy
// (SECURE_CSP in appliance/settings.py) runs no inline script, event handler or style attribute:
// - form[data-confirm]: submitting it asks first (window.confirm) with the attribute's text; "Cancel" stops it.
// - [data-width]: the element's width, a percentage (0-100), set through the CSSOM, which the policy allows.
// - button[data-copy]: copies the text of the element whose id the attribute names (a one-time key, a base URL)
//   and says "Copied". Rendered hidden and shown here, so a page without this script shows no dead button. Where
//   the Clipboard API is missing or refused (it needs HTTPS or localhost), the whole text is selected instead,
//   never a fragment of it, and the button says to press Ctrl+C (Cmd+C on a Mac).
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

  const copyButtons = (root) => {
    const found = [...root.querySelectorAll("button[data-copy]")];
    if (root instanceof Element && root.matches("button[data-copy]")) found.push(root);
    for (const button of found) button.hidden = false;
  };
  const selectWhole = (el) => {
    const range = document.createRange();
    range.selectNodeContents(el);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  };
  const say = (button, text) => {
    button.dataset.label ??= button.textContent;
    button.textContent = text;
    clearTimeout(Number(button.dataset.timer));
    button.dataset.timer = String(setTimeout(() => (button.textContent = button.dataset.label), 4000));
  };
  document.addEventListener("click", async (event) => {
    const button = event.target instanceof Element ? event.target.closest("button[data-copy]") : null;
    const source = button && document.getElementById(button.dataset.copy);
    if (!source) return;
    const text = source.textContent.trim();
    try {
      await navigator.clipboard.writeText(text);
      say(button, "Copied");
    } catch {
      selectWhole(source);
      say(button, /Mac/.test(navigator.platform) ? "Press Cmd+C" : "Press Ctrl+C");
    }
  });
  document.addEventListener("DOMContentLoaded", () => copyButtons(document));
  document.addEventListener("htmx:load", (event) => copyButtons(event.target));
})();
