"use strict";
// The page's few behaviours: unpack Plotly and draw the figures, open a cell's details on a
// click (matrix, tables, any point of a figure). It works from a file on disk and inside
// MLflow's artifact view (a sandboxed frame with scripts only: no storage, no forms, no
// pop-ups), so it uses none of those.

function notice(text) {
  const el = document.getElementById("notice");
  el.textContent = text;
  el.hidden = false;
}

// A gzip-compressed, base64 payload of the page, as text.
async function unpack(id) {
  const b64 = document.getElementById(id).textContent.trim();
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).text();
}

const plotly = unpack("plotly-js").then((source) => {
  const script = document.createElement("script");
  script.textContent = source;
  document.head.appendChild(script);
  return window.Plotly;
});

let detailsFragment = null;
function details() {
  detailsFragment = detailsFragment || unpack("cell-details").then((html) => {
    const t = document.createElement("template");
    t.innerHTML = html;
    return t.content;
  });
  return detailsFragment;
}

const CONFIG = { displaylogo: false, responsive: true };

async function draw(el, figure) {
  const Plotly = await plotly;
  await Plotly.newPlot(el, figure.data, figure.layout, CONFIG);
  el.on("plotly_click", (ev) => {
    const n = ev.points && ev.points[0] && ev.points[0].customdata;
    if (n) openCell(n);
  });
}

async function openCell(n) {
  const fragment = await details();
  const article = fragment.querySelector("#details-" + n);
  if (!article) return;
  const dialog = document.getElementById("details");
  const body = dialog.querySelector(".body");
  body.replaceChildren(article.cloneNode(true));
  if (!dialog.open) dialog.showModal();
  const chart = body.querySelector("script.chart");
  if (chart) await draw(body.querySelector(".samples"), JSON.parse(chart.textContent));
  dialog.dataset.ready = n;
}

document.addEventListener("click", (ev) => {
  const link = ev.target.closest("a[data-cell]");
  if (!link) return;
  ev.preventDefault();
  openCell(Number(link.dataset.cell)).catch((err) => notice("details: " + err));
});
document.querySelector("#details .close").addEventListener("click", () => {
  document.getElementById("details").close();
});

async function drawFigures() {
  for (const el of document.querySelectorAll("[data-figure]")) {
    const figure = JSON.parse(document.getElementById("data-" + el.dataset.figure).textContent);
    await draw(el, figure);
  }
  document.body.dataset.ready = "1";
}

if (typeof DecompressionStream === "undefined") {
  notice("This browser cannot unpack the page's charts and details (it lacks " +
         "DecompressionStream: use Chrome/Edge 80+, Firefox 113+ or Safari 16.4+); " +
         "the tables above are complete.");
} else {
  drawFigures().catch((err) => notice("charts could not be drawn: " + err));
  const hash = /^#cell-(\d+)$/.exec(location.hash);
  if (hash) openCell(Number(hash[1]));
}
