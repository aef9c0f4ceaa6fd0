// TEST DOUBLE: the lab's stand-in for Slurm-web 7.0.0's page (lab/web_images).
// Fills the three tables from the agent's API through the gateway, then sets
// document.body.dataset.loaded to "true" (or "error: ..." when a request fails).
"use strict";

const COLUMNS = {
  nodes: ["name", "state", "gres", "cpus", "partitions"],
  partitions: ["name", "nodes", "state"],
  jobs: ["id", "name", "user", "state", "nodes", "partition"],
};
const ROW_KEY = { nodes: "node", partitions: "partition", jobs: "job" };

function fill(what, items) {
  const body = document.querySelector(`#${what} tbody`);
  body.replaceChildren();
  for (const item of items) {
    const tr = document.createElement("tr");
    tr.dataset[ROW_KEY[what]] = String(what === "jobs" ? item.id : item.name);
    for (const col of COLUMNS[what]) {
      const td = document.createElement("td");
      td.className = col;
      const v = item[col];
      td.textContent = Array.isArray(v) ? v.join(",") : v == null ? "" : String(v);
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

async function load(what) {
  const r = await fetch(`api/${what}`, { headers: { Accept: "application/json" } });
  if (!r.ok) {
    let msg = `HTTP ${r.status}`;
    try { msg += `: ${(await r.json()).error}`; } catch (e) { /* not JSON */ }
    throw new Error(`${what}: ${msg}`);
  }
  fill(what, (await r.json())[what] || []);
}

Promise.all(Object.keys(COLUMNS).map(load)).then(
  () => { document.body.dataset.loaded = "true"; },
  (e) => { document.body.dataset.loaded = `error: ${e.message}`; },
);
