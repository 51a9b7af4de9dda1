// Runs the flame graph page's script in Node with a minimal fake DOM and canvas, drives it like
// a user (hover, click, search, Esc) and prints what it drew and showed as JSON lines. Used by
// the Rust test `flamegraph::tests::page_script_behaves` (skipped when `node` is missing).
//
// usage: node harness.js PAGE.html
"use strict";
const fs = require("fs");
const vm = require("vm");

const page = fs.readFileSync(process.argv[2], "utf8");
const json = page.match(/<script type="application\/json" id="profile-data">([\s\S]*?)<\/script>/)[1];
const code = page.match(/<script>\n([\s\S]*?)<\/script>/)[1];

const WIDTH = 1100;  // CSS pixels of the canvas
let drawn = [];      // rectangles of the last draw: {x, y, w, fill, alpha}
let labels = [];
function element(id) {
  const listeners = {};
  return {
    id, listeners, style: {}, textContent: id === "profile-data" ? json : "", className: "",
    value: "", checked: false, hidden: id === "diff-legend", offsetWidth: 100, offsetHeight: 20,
    clientWidth: WIDTH,
    addEventListener(type, fn) { listeners[type] = fn; },
    getBoundingClientRect() { return { left: 0, top: 0 }; },
    focus() {}, select() {},
    getContext() { return ctx; },
    set width(v) { drawn = []; labels = []; }, get width() { return WIDTH; },
    set height(v) {}, get height() { return 0; },
  };
}
const ctx = {
  fillStyle: "", globalAlpha: 1, font: "", textBaseline: "", strokeStyle: "", lineWidth: 1,
  setTransform() {}, clearRect() {},
  fillRect(x, y, w, h) {
    drawn.push({ x: Math.round(x), y, w: Math.round(w), fill: this.fillStyle, alpha: this.globalAlpha });
  },
  strokeRect() {},
  measureText(s) { return { width: s.length * 7 }; },
  fillText(s) { labels.push(s); },
};
const elements = {};
const docListeners = {};
const document = {
  getElementById(id) { return elements[id] || (elements[id] = element(id)); },
  addEventListener(type, fn) { docListeners[type] = fn; },
  body: { clientWidth: WIDTH },
  title: "",
};
const window = { devicePixelRatio: 1, innerWidth: 1400, innerHeight: 900, addEventListener() {} };
vm.runInNewContext(code, { document, window, console, Math, JSON, Map, Float64Array, Int32Array, Uint8Array, RegExp });

const canvas = elements.canvas;
function out(what, extra) {
  console.log(JSON.stringify(Object.assign({ what }, extra)));
}
function rects() {
  return drawn.filter(r => r.w > 0).map(r => [r.x, r.y / 16, r.w, r.fill === "#ee00ee" ? "match" : r.alpha < 1 ? "faded" : "plain"]);
}
out("start", {
  title: document.title, info: elements.info.textContent, rects: rects(), labels,
  fills: drawn.filter(r => r.w > 0).map(r => r.fill),
  diffLegend: !document.getElementById("diff-legend").hidden,
});
// Hover over the frame in row 3 (depth 3) near the left edge.
canvas.listeners.mousemove({ clientX: 10, clientY: 3 * 16 + 5 });
out("hover", { tip: elements.tip.textContent, shown: elements.tip.style.display });
// Click the frame in row 1 at x 900 (the second child of the root), zooming into it.
canvas.listeners.click({ clientX: 900, clientY: 16 + 5 });
out("zoom", { rects: rects() });
canvas.listeners.mousemove({ clientX: 10, clientY: 3 * 16 + 5 });
out("hover-zoomed", { tip: elements.tip.textContent });
docListeners.keydown({ key: "Escape", preventDefault() {} });
out("reset", { rects: rects() });
elements.search.value = "work";
elements.search.listeners.input();
out("search", { matched: elements.matched.textContent, rects: rects() });
elements.search.value = "^java\\.";
elements.regex.checked = true;
elements.regex.listeners.change();
out("regex", { matched: elements.matched.textContent });
elements.search.value = "(";
elements.search.listeners.input();
out("bad-regex", { matched: elements.matched.textContent, cls: elements.matched.className });
elements.search.value = "";
elements.search.listeners.input();
// The reversed view (key r), a hover in it, then back (the Reverse button).
docListeners.keydown({ key: "r", preventDefault() {} });
out("reversed", { rects: rects(), labels, button: elements.reverse.textContent,
                  orientation: elements.orientation.textContent });
canvas.listeners.mousemove({ clientX: 300, clientY: 3 * 16 + 5 });
out("hover-reversed", { tip: elements.tip.textContent });
elements.reverse.listeners.click();
out("forward", { rects: rects(), button: elements.reverse.textContent });
