// The ops page's one script: the task list's status counts, refreshed every few seconds.
"use strict";
(function () {
  const counts = document.getElementById("counts");
  if (!counts) return;
  const every = 5000;
  async function refresh() {
    try {
      const answer = await fetch(counts.dataset.source, { credentials: "same-origin" });
      if (!answer.ok) return;
      const figures = await answer.json();
      for (const cell of counts.querySelectorAll("[data-status]")) {
        const value = figures[cell.dataset.status] || 0;
        cell.textContent = value.toLocaleString("en-US");
      }
      counts.dataset.refreshed = new Date().toISOString();
    } catch (error) {
      // The service restarting: the next round tries again.
    }
  }
  setInterval(refresh, every);
  refresh();
})();
