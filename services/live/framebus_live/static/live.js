// framebus live: one WebSocket for every camera (docs/live.md). Boxes are drawn on a canvas over
// each tile's picture from the records, never burnt into the pixels. `window.framebusLive` holds
// the page's state, including each drawn box's rectangle in page pixels, for tests and tools.
"use strict";

const live = {
  connected: false,
  cameras: [],
  page: 0,
  pageSize: 16,
  palette: ["#00ffff"],
  tiles: {}, // camera -> {still, seq, framesShown, width, height, boxes: [{left, top, right, bottom, colour, label, carried}]}
  stats: {},
  alerts: [],
  pendingBoxes: {}, // camera -> the boxes message the next tile of that seq is drawn with
  framesShown: 0,
  paused: false, // the pause button: tiles are not replaced (figures and alerts go on)
  socket: null,
};
window.framebusLive = live;

let socket = null;
let subscribed = null; // the cameras last asked for on this socket, as sent
const headerDecoder = new TextDecoder();
const MAX_ALERTS = 100; // as many as the feed on the page lists

function connect() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
  socket = new WebSocket(url);
  live.socket = socket;
  socket.binaryType = "arraybuffer";
  setConnection("connecting");
  socket.onopen = () => {
    subscribed = null; // a new socket is a new viewer on the server: ask again
    setConnection("open");
  };
  socket.onclose = () => {
    setConnection("closed");
    setTimeout(connect, 1000);
  };
  socket.onmessage = (event) => {
    if (typeof event.data === "string") onText(JSON.parse(event.data));
    else onTile(event.data);
  };
}

function setConnection(state) {
  live.connected = state === "open";
  const el = document.getElementById("connection");
  el.dataset.state = state;
  el.textContent = state === "open" ? "live" : state === "closed" ? "disconnected, retrying…" : "connecting…";
}

function onText(msg) {
  switch (msg.type) {
    case "hello":
      live.pageSize = msg.page_size;
      live.palette = msg.palette;
      live.alerts = [];
      document.getElementById("alerts").replaceChildren();
      msg.alerts.forEach(addAlert);
      setCameras(msg.cameras);
      break;
    case "cameras":
      setCameras(msg.cameras);
      break;
    case "boxes":
      live.pendingBoxes[msg.camera] = msg;
      break;
    case "stats":
      live.stats = msg.cameras;
      for (const [camera, figures] of Object.entries(msg.cameras)) showFigures(camera, figures);
      break;
    case "alert":
      addAlert(msg.alert);
      break;
    case "clip":
      showClip(msg.alert, msg.clip);
      break;
  }
}

function pageCameras() {
  const start = live.page * live.pageSize;
  return live.cameras.slice(start, start + live.pageSize);
}

function setCameras(cameras) {
  live.cameras = cameras;
  const pages = Math.max(1, Math.ceil(cameras.length / live.pageSize));
  live.page = Math.min(live.page, pages - 1);
  renderPage();
}

function renderPage() {
  const pages = Math.max(1, Math.ceil(live.cameras.length / live.pageSize));
  document.getElementById("pager").hidden = pages <= 1;
  document.getElementById("page-label").textContent = `page ${live.page + 1} of ${pages}`;
  const wanted = pageCameras();
  const grid = document.getElementById("tiles");
  for (const tile of [...grid.children]) {
    if (!wanted.includes(tile.dataset.camera)) tile.remove();
  }
  wanted.forEach((camera, i) => {
    let tile = grid.querySelector(`.tile[data-camera="${CSS.escape(camera)}"]`);
    if (!tile) tile = makeTile(camera);
    if (grid.children[i] !== tile) grid.insertBefore(tile, grid.children[i] || null);
    if (live.stats[camera]) showFigures(camera, live.stats[camera]);
  });
  // The hello that calls this comes on an open socket; the pager's buttons only work then too.
  // A camera list that leaves this page as it was asks for nothing.
  const message = JSON.stringify({ type: "subscribe", cameras: wanted });
  if (socket && socket.readyState === WebSocket.OPEN && message !== subscribed) {
    socket.send(message);
    subscribed = message;
  }
}

function makeTile(camera) {
  const tile = document.createElement("figure");
  tile.className = "tile";
  tile.dataset.camera = camera;
  tile.innerHTML = `
    <div class="view"><img class="frame" alt=""><canvas class="overlay"></canvas></div>
    <figcaption><span class="name"></span><span class="state" data-state="waiting">waiting</span></figcaption>
    <dl class="figures">
      <dt>in</dt><dd data-figure="fps_in">–</dd><dt>out</dt><dd data-figure="fps_out">–</dd>
      <dt>p50</dt><dd data-figure="p50_ms">–</dd><dt>p99</dt><dd data-figure="p99_ms">–</dd>
      <dt>drops</dt><dd data-figure="drops">–</dd><dt>boxes</dt><dd data-figure="source">–</dd>
      <dt>still</dt><dd data-figure="still">–</dd>
    </dl>`;
  tile.querySelector(".name").textContent = camera;
  tile.querySelector(".figures").dataset.camera = camera;
  tile.querySelector("img").alt = `camera ${camera}`;
  return tile;
}

function tileOf(camera) {
  return document.querySelector(`.tile[data-camera="${CSS.escape(camera)}"]`);
}

function showFigures(camera, f) {
  const tile = tileOf(camera);
  if (!tile) return;
  const ms = (v) => (v === null ? "–" : `${v.toFixed(0)} ms`);
  const drops = Object.entries(f.drops).map(([k, n]) => `${k} ${n}`).join(", ") || "none";
  const values = {
    fps_in: `${f.fps_in.toFixed(1)}/s (${f.frames_in}/min)`,
    fps_out: `${f.fps_out.toFixed(1)}/s (${f.records_out}/min)`,
    p50_ms: ms(f.p50_ms),
    p99_ms: ms(f.p99_ms),
    drops,
    source: f.source || "–",
    still: `${f.still || 0}/min`,
  };
  for (const [key, text] of Object.entries(values)) {
    tile.querySelector(`[data-figure="${key}"]`).textContent = text;
  }
  const state = tile.querySelector(".state");
  state.dataset.state = f.state;
  state.textContent = f.state;
}

function onTile(buffer) {
  if (live.paused) return;
  const length = new DataView(buffer).getUint32(0);
  const header = JSON.parse(headerDecoder.decode(new Uint8Array(buffer, 4, length)));
  const tile = tileOf(header.camera);
  if (!tile) return;
  const boxes = live.pendingBoxes[header.camera];
  const img = tile.querySelector("img");
  const url = URL.createObjectURL(new Blob([new Uint8Array(buffer, 4 + length)], { type: "image/jpeg" }));
  // A tile that comes before the previous one loaded replaces it, and its onload with it: free its
  // URL here, as nothing else will.
  if (img.dataset.pending) URL.revokeObjectURL(img.dataset.pending);
  img.dataset.pending = url;
  img.onerror = () => {
    URL.revokeObjectURL(url);
    if (img.dataset.pending === url) delete img.dataset.pending;
  };
  img.onload = () => {
    if (img.dataset.url) URL.revokeObjectURL(img.dataset.url);
    img.dataset.url = url;
    delete img.dataset.pending;
    img.dataset.seq = header.seq;
    drawBoxes(header, tile, boxes && boxes.seq === header.seq ? boxes : null);
  };
  img.src = url;
}

function drawBoxes(header, tile, boxes) {
  const img = tile.querySelector("img");
  const canvas = tile.querySelector("canvas");
  const w = img.clientWidth;
  const h = img.clientHeight;
  const ratio = window.devicePixelRatio || 1;
  const cw = Math.round(w * ratio);
  const ch = Math.round(h * ratio);
  // Setting a canvas's size reallocates and clears it, even to the same size: only on a change.
  if (canvas.width !== cw || canvas.height !== ch) {
    canvas.width = cw;
    canvas.height = ch;
  }
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const rect = img.getBoundingClientRect();
  const drawn = [];
  if (boxes && boxes.orig_width > 0) {
    const sx = w / boxes.orig_width;
    const sy = h / boxes.orig_height;
    ctx.lineWidth = 2;
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "bottom";
    for (const b of boxes.boxes) {
      const colour = live.palette[b.class_id % live.palette.length];
      const x = b.x1 * sx, y = b.y1 * sy, bw = (b.x2 - b.x1) * sx, bh = (b.y2 - b.y1) * sy;
      ctx.strokeStyle = colour;
      // A carried box (a still frame: nothing moved) is where the object was last seen: dashed.
      ctx.setLineDash(b.carried ? [6, 4] : []);
      ctx.strokeRect(x, y, bw, bh);
      ctx.setLineDash([]);
      const label = [b.track, b.class_name, b.score.toFixed(2), b.carried ? "carried" : ""]
        .filter(Boolean).join(" ");
      const tw = ctx.measureText(label).width + 6;
      const ty = y >= 16 ? y - 1 : y + bh + 16;
      ctx.fillStyle = "rgba(0,0,0,0.6)";
      ctx.fillRect(x - 1, ty - 15, tw, 15);
      ctx.fillStyle = colour;
      ctx.fillText(label, x + 2, ty - 1);
      drawn.push({
        left: rect.left + window.scrollX + x,
        top: rect.top + window.scrollY + y,
        right: rect.left + window.scrollX + x + bw,
        bottom: rect.top + window.scrollY + y + bh,
        colour,
        label,
        track: b.track,
        class_name: b.class_name,
        score: b.score,
        carried: Boolean(b.carried),
      });
    }
  }
  // A still frame shows the camera's last full picture: say so on it.
  const still = Boolean(boxes && boxes.status === "STILL");
  if (still) {
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "top";
    ctx.fillStyle = "rgba(0,0,0,0.6)";
    ctx.fillRect(2, 2, ctx.measureText("still").width + 8, 16);
    ctx.fillStyle = "#ffffff";
    ctx.fillText("still", 6, 4);
  }
  tile.dataset.still = String(still);
  const previous = live.tiles[header.camera];
  live.tiles[header.camera] = {
    still,
    seq: header.seq,
    framesShown: (previous ? previous.framesShown : 0) + 1,
    width: header.width,
    height: header.height,
    image: { left: rect.left + window.scrollX, top: rect.top + window.scrollY, width: w, height: h },
    boxes: drawn,
  };
  live.framesShown += 1;
  // For tools that time the page (bench/live.py): which frame's boxes were drawn, and when.
  window.dispatchEvent(new CustomEvent("framebus-live:drawn", {
    detail: { camera: header.camera, seq: header.seq, boxes: drawn.length, drawn_at_ms: Date.now() },
  }));
}

function addAlert(a) {
  live.alerts.push(a);
  if (live.alerts.length > MAX_ALERTS) live.alerts.splice(0, live.alerts.length - MAX_ALERTS);
  const li = document.createElement("li");
  li.className = "alert";
  li.dataset.camera = a.camera;
  li.dataset.ruleType = a.rule_type;
  li.dataset.key = alertKey(a);
  const time = new Date(a.capture_ts_us / 1000).toLocaleTimeString();
  const what = a.rule_type === "LINE_CROSSING" ? `${a.direction} (count ${a.measure})` : a.rule_type === "DWELL" ? `${a.measure.toFixed(1)} s` : `${a.measure}`;
  li.innerHTML = `<span class="time"></span> <strong class="camera"></strong> <span class="rule-type"></span> <span class="track"></span> <span class="rule"></span> <span class="measure"></span>`;
  li.querySelector(".time").textContent = time;
  li.querySelector(".camera").textContent = a.camera;
  li.querySelector(".rule-type").textContent = a.rule_type;
  li.querySelector(".track").textContent = [a.track, a.classes.join(",")].filter(Boolean).join(" ");
  li.querySelector(".rule").textContent = a.rule;
  li.querySelector(".measure").textContent = what;
  li.append(document.createElement("div"));
  li.lastChild.className = "clip";
  if (a.clip) fillClip(li.lastChild, a.clip);
  const list = document.getElementById("alerts");
  list.prepend(li);
  while (list.children.length > MAX_ALERTS) list.lastChild.remove();
}

function alertKey(a) {
  return JSON.stringify([a.camera, a.rule, a.seq, a.capture_ts_us]);
}

// A clip record came: links beside its alert, or its status and reason when it has no file.
function showClip(target, clip) {
  const saved = live.alerts.find((a) => alertKey(a) === alertKey(target));
  if (saved) saved.clip = clip;
  for (const li of document.querySelectorAll("#alerts li")) {
    if (li.dataset.key === alertKey(target)) fillClip(li.querySelector(".clip"), clip);
  }
}

function fillClip(el, clip) {
  el.replaceChildren();
  for (const [label, file] of [["snapshot", clip.snapshot], ["clip", clip.video]]) {
    if (!file) continue;
    if (file.href) {
      const a = document.createElement("a");
      a.href = file.href;
      a.target = "_blank";
      a.rel = "noopener";
      a.textContent = label;
      a.className = label;
      el.append(a, " ");
    } else {
      const span = document.createElement("span");
      span.className = `${label} uri`;
      span.textContent = `${label}: ${file.text}`;
      el.append(span, " ");
    }
  }
  if (clip.status !== "WRITTEN" || clip.reason) {
    const why = document.createElement("span");
    why.className = "clip-status";
    why.textContent = [clip.status, clip.reason].filter(Boolean).join(": ");
    el.append(why);
  }
}

document.getElementById("pause").onclick = (event) => {
  live.paused = !live.paused;
  event.target.textContent = live.paused ? "resume" : "pause";
};
document.getElementById("prev").onclick = () => { live.page = Math.max(0, live.page - 1); renderPage(); };
document.getElementById("next").onclick = () => {
  live.page = Math.min(Math.ceil(live.cameras.length / live.pageSize) - 1, live.page + 1);
  renderPage();
};
connect();
