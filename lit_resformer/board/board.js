// The board page's filters and sorting (lit_resformer.board.scoreboard.html_page), inline in the page.
//
// Filters: every element they act on carries data-verdict, data-grid and data-regime, each a "|"-separated list of
// the values it matches (empty: none). An element shows when each filter is at "all" or its choice is in the list;
// choosing a grid also unfolds that grid's plot. Sorting: a claims table's header holds a button; a click sorts the
// rows by that column, ascending, then descending. A cell's data-sort, where it has one, is what it sorts by: a
// number in a column whose header says data-type="number", where an empty data-sort sorts last either way.
(() => {
  const form = document.querySelector("form.filters");
  const items = Array.from(document.querySelectorAll("[data-verdict]"));
  const matches = (item, key, wanted) => !wanted || item.dataset[key].split("|").includes(wanted);

  function filter() {
    const wanted = ["verdict", "grid", "regime"].map(key => [key, form.elements[key].value]);
    let shown = 0, claims = 0;
    for (const item of items) {
      item.hidden = !wanted.every(([key, value]) => matches(item, key, value));
      if (item.matches("tbody tr")) { claims += 1; shown += !item.hidden; }
      if (!item.hidden && form.elements.grid.value && item.matches("details")) item.open = true;
    }
    form.querySelector("output").textContent = `${shown} of ${claims} claims shown`;
  }
  if (form) {
    form.addEventListener("change", filter);
    form.addEventListener("reset", () => setTimeout(filter));  // once the form holds its defaults again
    filter();
  }

  for (const table of document.querySelectorAll("table.board")) {
    const headers = Array.from(table.tHead.rows[0].cells);
    headers.forEach((header, column) => header.querySelector("button").addEventListener("click", () => {
      const ascending = header.getAttribute("aria-sort") !== "ascending";
      headers.forEach(h => h.removeAttribute("aria-sort"));
      header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      const numeric = header.dataset.type === "number";
      const key = row => {
        const cell = row.cells[column];
        const text = cell.dataset.sort ?? cell.textContent.trim();
        return numeric ? (text === "" ? null : Number(text)) : text;
      };
      const order = (a, b) => {
        const x = key(a), y = key(b);
        if (x === null || y === null) return (x === null) - (y === null);
        const by = numeric ? x - y : x.localeCompare(y);
        return ascending ? by : -by;
      };
      const body = table.tBodies[0];
      Array.from(body.rows).sort(order).forEach(row => body.appendChild(row));
    }));
  }
})();
