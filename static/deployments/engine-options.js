// The new-deployment form offers only the options of the engine picked: each input lists the engines it applies
// to in data-engines (console.deployments.forms); the others' paragraphs are hidden.
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("new-deployment");
  if (!form) return;
  const show = () =>
    form.querySelectorAll("[data-engines]").forEach((input) => {
      input.closest("p").hidden = !input.dataset.engines.split(" ").includes(form.elements.engine.value);
    });
  form.elements.engine.addEventListener("change", show);
  show();
});
