(function () {
  var f = document.getElementById("filter");
  if (!f) return;
  f.addEventListener("input", function () {
    var q = f.value.toLowerCase();
    document.querySelectorAll(".card").forEach(function (c) {
      c.classList.toggle("hidden", q && c.dataset.key.toLowerCase().indexOf(q) < 0);
    });
  });
})();
