// memsvc console: a little progressive enhancement; every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // The threshold slider: show its value and grey the results below it as it moves,
  // and search again when it is let go.
  const slider = document.getElementById("threshold");
  const shown = document.getElementById("threshold-value");
  if (slider && shown) {
    const regrey = () => {
      const t = parseFloat(slider.value);
      shown.textContent = t.toFixed(2);
      document.querySelectorAll(".result[data-similarity]").forEach((li) => {
        li.classList.toggle("below-now", parseFloat(li.dataset.similarity) < t);
      });
    };
    slider.addEventListener("input", regrey);
    slider.addEventListener("change", () => {
      const form = slider.form;
      if (form && form.checkValidity()) form.requestSubmit();
    });
  }
  // Copy a one-time secret.
  document.querySelectorAll("[data-copy]").forEach((button) => {
    button.addEventListener("click", async () => {
      const input = document.getElementById(button.dataset.copy);
      try {
        await navigator.clipboard.writeText(input.value);
      } catch {
        input.select();
        document.execCommand("copy");
      }
      button.textContent = "Copied";
    });
  });
  // Delete-all: the button stays disabled until the user id is typed exactly.
  document.querySelectorAll("input[data-must-equal]").forEach((input) => {
    const button = input.form.querySelector("[data-enable-when-confirmed]");
    const check = () => { button.disabled = input.value !== input.dataset.mustEqual; };
    input.addEventListener("input", check);
    check();
  });
});
