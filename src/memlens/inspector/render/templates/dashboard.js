// @ts-check
(function () {
  var f = /** @type {HTMLInputElement | null} */ (document.getElementById("filter"));
  if (!f) return;
  var filter = f;
  filter.addEventListener("input", function () {
    var q = filter.value.toLowerCase();
    document.querySelectorAll(".card").forEach(function (c) {
      var key = /** @type {HTMLElement} */ (c).dataset.key || "";
      c.classList.toggle("hidden", !!q && key.toLowerCase().indexOf(q) < 0);
    });
  });
})();
