// ipkeeper address map: draws /api/pools on canvases, opens
// /api/blocks/{cidr} on click, searches /api/search and follows
// /api/events (server-sent events) to stay live. Plain JS, no build step.
//
// window.ipkMap exposes what is drawn (for tests and for the curious):
// revision and generation shown, every pool's cells with their geometry
// and colours, the selected block and its address rows.
'use strict';
(() => {
  const $ = (sel, root = document) => root.querySelector(sel);
  const el = (tag, attrs = {}, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  };

  // Colours shared with the legend (app.css).
  const C = {
    unclaimed: '#eceff3', noroom: '#c4c8cd', leak: '#ffd400', orphan: '#5f6368', borrowed: '#000000',
    gapBg: '#f7f8fa', gapLine: '#aab0b7', free: '#ffffff', freeLine: '#dadce0', select: '#1a73e8', tick: '#5f6368',
    noNode: '#8c8c8c',
  };

  const ipkMap = window.ipkMap = {
    ready: false, revision: 0, generation: -1, updates: 0, dpr: window.devicePixelRatio || 1,
    pools: {}, selected: null, detail: null, focusNode: null, timing: {}, live: false,
  };
  const st = { ov: null, nodes: null, colors: {}, selected: null, focusNode: null, nodeSort: 'inUse', nodeAll: false, gen: -1 };

  // ---- helpers ----
  const tintCache = new Map();
  function tint(hex) {
    let t = tintCache.get(hex);
    if (!t) {
      const n = parseInt(hex.slice(1), 16);
      const mix = (c) => Math.round(c + (255 - c) * 0.72);
      t = '#' + [n >> 16 & 255, n >> 8 & 255, n & 255].map((c) => mix(c).toString(16).padStart(2, '0')).join('');
      tintCache.set(hex, t);
    }
    return t;
  }
  const colorOf = (node) => (node ? st.colors[node] || C.noNode : C.noNode);
  const fmt = (n) => Number(n).toLocaleString('en-US');
  function fmtBig(n) {
    if (n < 1e7) return fmt(Math.round(n));
    const l = Math.log2(n);
    return (Math.abs(l - Math.round(l)) < 1e-9 ? '' : '≈') + '2^' + (Number.isInteger(Math.round(l * 10) / 10) ? Math.round(l) : l.toFixed(1));
  }
  const pct = (a, b) => (b > 0 ? (100 * a / b < 0.1 && a > 0 ? '<0.1' : (100 * a / b).toFixed(1)) : '0') + '%';
  function dur(s) {
    if (s < 90) return Math.max(0, Math.round(s)) + 's';
    if (s < 5400) return Math.round(s / 60) + 'm';
    if (s < 172800) return Math.round(s / 3600) + 'h';
    if (s < 3.2e9) return Math.round(s / 86400) + 'd';
    return 'over a century';
  }
  function v4ToInt(s) { return s.split('.').reduce((a, o) => a * 256 + Number(o), 0); }
  function intToV4(n) { return [n >>> 24 & 255, n >>> 16 & 255, n >>> 8 & 255, n & 255].join('.'); }
  function since(iso) {
    if (!iso) return '';
    const s = (Date.now() - new Date(iso).getTime()) / 1000;
    if (s < 90) return Math.max(0, Math.round(s)) + 's ago';
    if (s < 5400) return Math.round(s / 60) + 'm ago';
    if (s < 172800) return Math.round(s / 3600) + 'h ago';
    return Math.round(s / 86400) + 'd ago';
  }

  async function getJSON(path) {
    const resp = await fetch(path, { credentials: 'same-origin', cache: 'no-cache' });
    if (resp.status === 401) throw new Error('This map needs a token: open it once as …/?token=<token>.');
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(body.error || resp.status + ' ' + resp.statusText);
    return body;
  }

  function banner(msg) {
    const b = $('#banner');
    b.hidden = !msg;
    b.textContent = msg || '';
  }

  function setStatus(state, text) {
    const s = $('#status');
    s.dataset.state = state;
    $('.text', s).textContent = text;
  }

  // ---- loading ----
  let inflight = false, pending = false;
  async function refresh() {
    if (inflight) { pending = true; return; }
    inflight = true;
    const t0 = performance.now();
    try {
      const [ov, nodes] = await Promise.all([getJSON('api/pools'), getJSON('api/nodes')]);
      const t1 = performance.now();
      st.ov = ov; st.nodes = nodes; st.colors = ov.colors || {};
      renderPools();
      const tp = performance.now();
      renderNodes();
      const tn = performance.now();
      if (st.selected) await loadDetail(st.selected, false);
      const t2 = performance.now();
      ipkMap.timing.steps = { pools: tp - t1, nodes: tn - tp, detail: t2 - tn };
      banner(ov.error ? 'Reading the datastore failed (showing the last state read): ' + ov.error : '');
      ipkMap.revision = ov.revision;
      ipkMap.generation = ov.generation;
      ipkMap.updates++;
      ipkMap.timing = { fetchMs: t1 - t0, renderMs: t2 - t1, readyAt: ipkMap.timing.readyAt || t2, lastAt: t2, steps: ipkMap.timing.steps };
      if (!ipkMap.ready) { ipkMap.ready = true; document.documentElement.dataset.ready = 'true'; }
      updateStatus();
    } catch (e) {
      banner(e.message);
      setStatus('error', 'error');
    } finally {
      inflight = false;
      if (pending) { pending = false; refresh(); }
    }
  }

  function updateStatus() {
    if (!st.ov) return;
    const when = st.ov.updated ? new Date(st.ov.updated).toLocaleTimeString() : '';
    const live = ipkMap.live ? 'live' : 'reconnecting';
    setStatus(st.ov.error ? 'error' : ipkMap.live ? 'live' : 'connecting', `${live} · revision ${st.ov.revision} · ${when}`);
  }

  function listen() {
    const es = new EventSource('api/events');
    es.addEventListener('update', (ev) => {
      ipkMap.live = true;
      const d = JSON.parse(ev.data);
      if (d.generation !== ipkMap.generation) refresh(); else updateStatus();
    });
    es.onopen = () => { ipkMap.live = true; updateStatus(); };
    es.onerror = () => { ipkMap.live = false; setStatus('connecting', 'reconnecting…'); };
  }

  // ---- pools ----
  function renderPools() {
    const root = $('#pools');
    const pools = st.ov.pools;
    const keep = new Set(pools.map((p) => p.name));
    for (const a of [...root.children]) if (!keep.has(a.dataset.pool)) a.remove();
    if (!pools.length) {
      root.replaceChildren(el('p', { class: 'empty', text: st.ov.loaded ? 'No pools yet: they appear with the first allocation or `ipkeeperctl pool add`.' : 'Reading the datastore…' }));
      ipkMap.pools = {};
      return;
    }
    const drawn = {};
    let prev = null;
    for (const p of pools) {
      let art = root.querySelector(`article[data-pool="${CSS.escape(p.name)}"]`);
      if (!art) {
        art = el('article', { class: 'pool', 'data-pool': p.name },
          el('h2'), el('div', { class: 'stats' }), el('div', { class: 'meter' }, el('span')),
          el('canvas', { class: 'bar' }), el('div', { class: 'axis' }), el('canvas', { class: 'grid' }));
        const grid = $('canvas.grid', art);
        grid.addEventListener('mousemove', (e) => hover(e, p.name));
        grid.addEventListener('mouseleave', () => { $('#tip').hidden = true; });
        grid.addEventListener('click', (e) => clickGrid(e, p.name));
      }
      if (art.parentNode !== root || art.previousElementSibling !== prev) (prev ? prev.after(art) : root.prepend(art));
      for (const e of [...root.children]) if (!e.dataset.pool) e.remove();
      prev = art;
      header(art, p);
      drawn[p.name] = drawPool(art, p);
    }
    ipkMap.pools = drawn;
  }

  function header(art, p) {
    const h = $('h2', art);
    const tags = [p.missing ? 'definition missing' : `IPv${p.family}`, p.blockSize ? `/${p.blockSize} blocks` : null,
      p.layout === 'compressed' ? 'compressed axis' : null, p.strictAffinity ? 'strict affinity' : null,
      p.disabled ? 'disabled' : null, p.deleting ? 'deleting' : null, p.nodeSelector ? 'nodes: ' + p.nodeSelector : null,
      p.runsOut ? (p.exhaustionSeconds > 0 ? 'runs out in ' + dur(p.exhaustionSeconds) : 'full') : null];
    h.replaceChildren(el('span', { text: p.name }), el('span', { class: 'cidr', text: p.cidr || '' }),
      ...tags.filter(Boolean).map((t) => el('span', { class: 'tag' + (/missing|disabled|deleting|runs out|full/.test(t) ? ' warn' : ''), text: t })));
    const usable = p.usable || 0;
    const parts = [el('b', { text: fmt(p.inUse) }), ` in use of ${usable >= 1e7 ? fmtBig(usable) : fmt(usable)} usable (${pct(p.inUse, usable)}) · `,
      el('b', { text: fmt(p.claimed) }), ` of ${p.numBlocks >= 1e7 ? fmtBig(p.numBlocks) : fmt(p.numBlocks || p.claimed)} blocks claimed`];
    if (p.borrowed) parts.push(' · ', el('b', { text: fmt(p.borrowed) }), ' borrowed');
    if (p.leaks) parts.push(' · ', el('b', { text: fmt(p.leaks) }), p.leaks === 1 ? ' leak candidate' : ' leak candidates');
    if (p.orphans) parts.push(' · ', el('b', { text: fmt(p.orphans) }), ' without handle');
    if (p.exhaustionSeconds != null) {
      parts.push(' · ', el('b', { class: 'forecast', text: p.exhaustionSeconds > 0 ? 'runs out in ' + dur(p.exhaustionSeconds) : 'full' }),
        ` at the rate of the last ${dur(p.forecastWindowSeconds || 0)}`);
    }
    $('.stats', art).replaceChildren(...parts);
    $('.meter > span', art).style.width = usable > 0 ? Math.min(100, 100 * p.inUse / usable) + '%' : '0';
    Object.assign(art.dataset, { claimed: p.claimed, inUse: p.inUse, borrowed: p.borrowed, leaks: p.leaks, layout: p.layout,
      runsOut: p.runsOut ? 'true' : 'false' });
  }

  function sizeCanvas(c, w, h) {
    const dpr = window.devicePixelRatio || 1;
    c.style.width = w + 'px';
    c.style.height = h + 'px';
    c.width = Math.round(w * dpr);
    c.height = Math.round(h * dpr);
    const ctx = c.getContext('2d', { alpha: false });
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  }

  // The cells of a pool in drawing order: for a linear pool every block
  // index (claimed or not); for a compressed one the claimed blocks with
  // a gap cell for every unclaimed stretch.
  function cellsOf(p) {
    const cells = [];
    if (p.layout === 'linear') {
      const n = p.numBlocks;
      const noroom = new Uint8Array(n);
      for (const r of p.reserved) {
        if (r.reason !== 'excluded' && r.reason !== 'outside range') continue;
        const from = Math.ceil(r.pos * n - 1e-9), to = Math.floor(r.end * n + 1e-9);
        for (let i = from; i < to; i++) noroom[i] = 1;
      }
      const byIndex = new Map(p.blocks.map((b) => [b.index, b]));
      for (let i = 0; i < n; i++) cells.push(byIndex.get(i) || { index: i, unclaimed: true, noroom: !!noroom[i] });
    } else {
      for (const b of p.blocks) {
        if (b.gap) cells.push({ gapCell: b.gap });
        cells.push(b);
      }
      if (p.trailingGap) cells.push({ gapCell: p.trailingGap });
    }
    return cells;
  }

  function drawPool(art, p) {
    const gridC = $('canvas.grid', art), barC = $('canvas.bar', art);
    const W = Math.max(200, art.clientWidth - 32);
    const cells = cellsOf(p);
    const n = Math.max(1, cells.length);
    let s = Math.floor(Math.sqrt(W * 420 / n));
    s = Math.max(3, Math.min(44, s));
    const cols = Math.max(1, Math.min(n, Math.floor(W / s)));
    const rows = Math.ceil(n / cols);
    const gap = s >= 6 ? 1 : 0;
    const ctx = sizeCanvas(gridC, cols * s, rows * s);
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, cols * s, rows * s);
    if (gap === 0 && p.layout === 'linear') {
      // Cells touch: paint every cell unclaimed at once, then draw the rest.
      ctx.fillStyle = C.unclaimed;
      ctx.fillRect(0, 0, cols * s, Math.floor(n / cols) * s);
      ctx.fillRect(0, Math.floor(n / cols) * s, (n % cols) * s, s);
    }
    const out = { layout: p.layout, cell: s, cols, rows, blocks: [], gaps: 0, unclaimed: 0 };
    const sel = st.selected && st.selected.pool === p.name ? st.selected.cidr : null;
    let selCell = null;
    cells.forEach((c, i) => {
      const x = (i % cols) * s, y = Math.floor(i / cols) * s, w = s - gap, h = s - gap;
      if (c.gapCell) { drawGapCell(ctx, x, y, w, h); out.gaps++; return; }
      if (c.unclaimed) {
        if (gap !== 0 || c.noroom) {
          ctx.fillStyle = c.noroom ? C.noroom : C.unclaimed;
          ctx.fillRect(x, y, w, h);
        }
        out.unclaimed++;
        return;
      }
      const d = drawBlockCell(ctx, x, y, w, h, c, p);
      out.blocks.push(Object.assign({ cidr: c.cidr, node: c.node || '', x, y, w, h, inUse: c.inUse, borrowed: c.borrowed || 0, leaks: c.leaks || 0, reserved: c.reserved }, d));
      if (sel === c.cidr) selCell = [x, y, w, h];
    });
    if (selCell) {
      const [x, y, w, h] = selCell;
      ctx.strokeStyle = C.select;
      ctx.lineWidth = 2;
      ctx.strokeRect(x - 1, y - 1, w + 2, h + 2);
      out.selected = sel;
    }
    gridC._cells = cells;
    gridC._geom = { s, cols, gap };
    out.bar = drawBar(barC, W, p);
    const axis = $('.axis', art);
    if (p.layout === 'linear' && p.cidr) {
      const base = v4ToInt(p.cidr.split('/')[0]);
      const size = p.numBlocks * p.blockAddrs;
      axis.replaceChildren(el('span', { text: intToV4(base) }), el('span', { text: intToV4(base + size / 2) }), el('span', { text: intToV4(base + size - 1) }));
    } else {
      axis.replaceChildren(el('span', { text: p.cidr ? p.cidr.split('/')[0] : '' }), el('span', { text: 'claimed blocks only, unclaimed stretches compressed' }), el('span', { text: '' }));
    }
    return out;
  }

  function drawBlockCell(ctx, x, y, w, h, b, p) {
    const color = colorOf(b.node);
    const dim = st.focusNode && b.node !== st.focusNode;
    ctx.fillStyle = tint(color);
    ctx.fillRect(x, y, w, h);
    const cap = Math.max(1, p.blockAddrs - b.reserved);
    let fh = 0;
    if (b.inUse > 0) {
      fh = Math.max(1, Math.round(h * Math.min(1, b.inUse / cap)));
      ctx.fillStyle = color;
      ctx.fillRect(x, y + h - fh, w, fh);
    }
    const m = Math.max(3, Math.round(w * 0.42));
    if (b.borrowed > 0) {
      ctx.fillStyle = C.borrowed;
      ctx.beginPath();
      ctx.moveTo(x + w - m, y);
      ctx.lineTo(x + w, y);
      ctx.lineTo(x + w, y + m);
      ctx.closePath();
      ctx.fill();
    }
    if (b.leaks > 0) {
      const k = Math.max(2, m - 1);
      ctx.fillStyle = '#000';
      ctx.fillRect(x, y, k + 1, k + 1);
      ctx.fillStyle = C.leak;
      ctx.fillRect(x, y, k, k);
    }
    if (b.orphans > 0 && w >= 8) {
      ctx.fillStyle = C.orphan;
      ctx.fillRect(x, y + h - 2, w, 2);
    }
    if (dim) {
      ctx.fillStyle = 'rgba(255,255,255,0.78)';
      ctx.fillRect(x, y, w, h);
    }
    return { color, tint: tint(color), fill: fh, markBorrowed: b.borrowed > 0, markLeak: b.leaks > 0, marker: m, dimmed: !!dim };
  }

  function drawGapCell(ctx, x, y, w, h) {
    ctx.fillStyle = C.gapBg;
    ctx.fillRect(x, y, w, h);
    ctx.fillStyle = C.gapLine;
    const r = Math.max(1, w / 10);
    for (let k = 1; k <= 3; k++) ctx.fillRect(x + (k * w) / 4 - r / 2, y + h / 2 - r / 2, r, r);
  }

  // The pool's address space as a bar: linear (every block at its place)
  // or compressed (claimed blocks one unit each, unclaimed stretches by
  // the log of their length).
  function drawBar(c, W, p) {
    const H = 18;
    const ctx = sizeCanvas(c, W, H);
    ctx.fillStyle = C.unclaimed;
    ctx.fillRect(0, 0, W, H);
    const out = { layout: p.layout, segments: [] };
    if (p.layout === 'linear') {
      for (const r of p.reserved) {
        const x0 = r.pos * W, x1 = Math.max(x0 + 1, r.end * W);
        if (r.reason === 'excluded' || r.reason === 'outside range') hatch(ctx, x0, 0, x1 - x0, H);
      }
      const n = p.numBlocks;
      for (const b of p.blocks) {
        const x0 = (b.index / n) * W, x1 = Math.max(x0 + 1, ((b.index + 1) / n) * W);
        ctx.fillStyle = colorOf(b.node);
        ctx.fillRect(x0, 0, x1 - x0, H);
        out.segments.push({ cidr: b.cidr, x: x0, w: x1 - x0 });
      }
      // Single reserved addresses (network, gateway, broadcast) as ticks
      // over the blocks.
      for (const r of p.reserved) {
        if (r.reason === 'excluded' || r.reason === 'outside range') continue;
        ctx.fillStyle = C.tick;
        ctx.fillRect(Math.min(Math.floor(r.pos * W), W - 2), 0, 2, H / 3);
      }
      return out;
    }
    const weight = (g) => 1 + Math.log2(g) / 4;
    let total = 0;
    for (const b of p.blocks) total += 1 + (b.gap ? weight(b.gap) : 0);
    if (p.trailingGap) total += weight(p.trailingGap);
    const u = W / Math.max(total, 1);
    let x = 0;
    const gapAt = (g) => {
      const w = weight(g) * u;
      ctx.fillStyle = C.gapBg;
      ctx.fillRect(x, 0, w, H);
      ctx.strokeStyle = C.gapLine;
      ctx.lineWidth = 1;
      ctx.beginPath();
      const mx = x + w / 2;
      ctx.moveTo(mx - 3, 0); ctx.lineTo(mx + 3, H / 3); ctx.lineTo(mx - 3, (2 * H) / 3); ctx.lineTo(mx + 3, H);
      ctx.stroke();
      ctx.font = '10px system-ui, sans-serif';
      const label = fmtBig(g) + ' unclaimed';
      const tw = ctx.measureText(label).width;
      if (w / 2 - 10 > tw) {
        ctx.fillStyle = C.tick;
        ctx.textBaseline = 'middle';
        ctx.fillText(label, mx + 8, H / 2);
      }
      out.segments.push({ gap: g, x, w });
      x += w;
    };
    for (const b of p.blocks) {
      if (b.gap) gapAt(b.gap);
      ctx.fillStyle = colorOf(b.node);
      ctx.fillRect(x, 0, Math.max(1, u), H);
      out.segments.push({ cidr: b.cidr, x, w: u });
      x += u;
    }
    if (p.trailingGap) gapAt(p.trailingGap);
    return out;
  }

  function hatch(ctx, x, y, w, h) {
    ctx.save();
    ctx.beginPath();
    ctx.rect(x, y, w, h);
    ctx.clip();
    ctx.fillStyle = '#e3e5e8';
    ctx.fillRect(x, y, w, h);
    ctx.strokeStyle = C.noroom;
    ctx.lineWidth = 2;
    for (let i = -h; i < w; i += 5) {
      ctx.beginPath();
      ctx.moveTo(x + i, y + h);
      ctx.lineTo(x + i + h, y);
      ctx.stroke();
    }
    ctx.restore();
  }

  function cellAt(e, canvas) {
    const r = canvas.getBoundingClientRect();
    const { s, cols } = canvas._geom || {};
    if (!s) return null;
    const col = Math.floor((e.clientX - r.left) / s), row = Math.floor((e.clientY - r.top) / s);
    if (col < 0 || col >= cols) return null;
    return canvas._cells[row * cols + col] || null;
  }

  function poolByName(name) { return st.ov && st.ov.pools.find((p) => p.name === name); }

  function blockCIDR(p, c) {
    if (c.cidr) return c.cidr;
    if (c.unclaimed && p.cidr && p.family === 4) return intToV4(v4ToInt(p.cidr.split('/')[0]) + c.index * p.blockAddrs) + '/' + p.blockSize;
    return null;
  }

  function hover(e, name) {
    const tip = $('#tip');
    const p = poolByName(name);
    const c = p && cellAt(e, e.currentTarget);
    if (!c) { tip.hidden = true; return; }
    let html;
    if (c.gapCell) html = `${fmtBig(c.gapCell)} unclaimed block${c.gapCell === 1 ? '' : 's'}`;
    else if (c.unclaimed) html = `<span class="mono">${blockCIDR(p, c)}</span> · ${c.noroom ? 'reserved (no usable address)' : 'unclaimed'}`;
    else {
      const cap = p.blockAddrs - c.reserved;
      html = `<span class="mono">${c.cidr}</span> · ${esc(c.node || 'no node')}<br>${c.inUse} of ${cap} usable in use` +
        (c.borrowed ? ` · ${c.borrowed} borrowed` : '') + (c.leaks ? ` · ${c.leaks} leak candidate${c.leaks > 1 ? 's' : ''}` : '') +
        (c.reserved ? ` · ${c.reserved} reserved` : '') + (c.orphans ? ` · ${c.orphans} without handle` : '');
    }
    tip.innerHTML = html;
    tip.hidden = false;
    tip.style.left = Math.min(e.clientX + 14, window.innerWidth - 300) + 'px';
    tip.style.top = e.clientY + 14 + 'px';
  }

  function esc(s) { return String(s).replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch]); }

  function clickGrid(e, name) {
    const p = poolByName(name);
    const c = p && cellAt(e, e.currentTarget);
    if (!c || c.gapCell) return;
    const cidr = blockCIDR(p, c);
    if (cidr) select({ pool: name, cidr, addr: null }, false);
  }

  // ---- block detail ----
  async function select(sel, scroll) {
    st.selected = sel;
    ipkMap.selected = sel;
    renderPools();
    if (scroll) scrollToBlock(sel);
    await loadDetail(sel, true);
  }

  function scrollToBlock(sel) {
    const d = ipkMap.pools[sel.pool];
    const art = document.querySelector(`article[data-pool="${CSS.escape(sel.pool)}"]`);
    if (!d || !art) return;
    const b = d.blocks.find((x) => x.cidr === sel.cidr);
    const grid = $('canvas.grid', art);
    const top = grid.getBoundingClientRect().top + window.scrollY + (b ? b.y : 0) - 160;
    window.scrollTo({ top: Math.max(0, top), behavior: 'instant' });
  }

  async function loadDetail(sel, fresh) {
    let d;
    try {
      d = await getJSON('api/blocks/' + sel.cidr + '?pool=' + encodeURIComponent(sel.pool));
    } catch (e) {
      const box = $('#detail');
      box.hidden = false;
      box.replaceChildren(el('h2', { text: sel.cidr }), el('p', { class: 'note', text: e.message }));
      ipkMap.detail = { cidr: sel.cidr, error: e.message };
      return;
    }
    if (st.selected !== sel) return; // another selection won meanwhile
    renderDetail(d, sel, fresh);
  }

  function renderDetail(d, sel, fresh) {
    const box = $('#detail');
    box.hidden = false;
    box.dataset.cidr = d.cidr;
    box.dataset.pool = d.pool;
    const usable = d.size - d.reserved;
    const close = el('button', { class: 'close', type: 'button', title: 'close', text: '×' });
    close.onclick = () => { st.selected = null; ipkMap.selected = null; ipkMap.detail = null; box.hidden = true; renderPools(); };
    const sub = el('div', { class: 'sub' }, el('span', { class: 'swatch', style: `background:${d.color}` }),
      d.claimed ? (d.node || 'no node') : 'unclaimed', ` · ${d.inUse} of ${usable} usable in use`,
      d.borrowed ? ` · ${d.borrowed} borrowed` : '', d.leaks ? ` · ${d.leaks} leak candidate${d.leaks > 1 ? 's' : ''}` : '',
      d.reserved ? ` · ${d.reserved} reserved` : '', d.orphans ? ` · ${d.orphans} without handle` : '');
    const cols = d.size <= 256 ? 16 : d.size <= 1024 ? 32 : 64;
    const W = Math.max(200, box.clientWidth - 32);
    const s = Math.max(3, Math.min(22, Math.floor(W / cols)));
    const canvas = el('canvas', { class: 'addrgrid' });
    const byOrd = new Map(d.addresses.map((a) => [a.ordinal, a]));
    const rows = d.addresses.slice(0, 2000).map((a) => {
      const who = a.pod ? (a.namespace ? a.namespace + '/' : '') + a.pod : '';
      const tr = el('tr', { 'data-addr': a.addr, 'data-state': a.state },
        el('td', { class: 'addr', text: a.addr }),
        el('td', {}, el('span', { class: 'state ' + a.state, text: a.state === 'reserved' ? a.reason : a.state === 'leak' ? 'leak' : a.state })),
        el('td', { class: 'who' }, who || (a.state === 'orphan' ? 'handle missing' : ''),
          a.handle ? el('div', { class: 'handle', text: a.handle, title: a.containerID ? `container ${a.containerID}, interface ${a.ifname || ''}` : '' }) : null,
          a.leak ? el('div', { class: 'handle', text: 'leak candidate: ' + a.leak.reason + (a.leak.since ? ', since ' + since(a.leak.since) : '') }) : null,
          a.sticky ? el('div', { class: 'handle sticky', text: 'sticky ' + a.sticky + (a.parked ? ', reserved, no pod since ' + since(a.parked) : '') }) : null),
        el('td', {}, a.node ? el('span', { class: 'swatch', style: `background:${colorOf(a.node)}` }) : null, a.node || ''),
        el('td', { text: since(a.since), title: a.since ? new Date(a.since).toISOString().replace('T', ' ').slice(0, 19) + ' UTC' : '' }));
      return tr;
    });
    const table = el('div', { class: 'addrs' }, el('table', {},
      el('thead', {}, el('tr', {}, ...['address', 'state', 'pod · handle', 'node', 'since'].map((t) => el('th', { text: t })))),
      el('tbody', {}, ...rows)));
    const note = d.addresses.length > rows.length ? el('p', { class: 'note', text: `first ${rows.length} of ${d.addresses.length} addresses listed` }) : null;
    box.replaceChildren(...[el('h2', {}, el('span', { class: 'cidr', text: d.cidr }), el('span', { class: 'muted', text: 'pool ' + d.pool }), close),
      sub, canvas, table, note].filter(Boolean));
    const drawn = drawAddrGrid(canvas, d, byOrd, cols, s, sel.addr);
    canvas.onclick = (e) => {
      const r = canvas.getBoundingClientRect();
      const ord = Math.floor((e.clientY - r.top) / s) * cols + Math.floor((e.clientX - r.left) / s);
      const a = byOrd.get(ord);
      highlight(a ? a.addr : null);
    };
    ipkMap.detail = { cidr: d.cidr, pool: d.pool, generation: d.generation, cell: s, cols, map: d.map, cells: drawn,
      rows: d.addresses.map((a) => ({ addr: a.addr, state: a.state, pod: a.pod || '', namespace: a.namespace || '', node: a.node || '', handle: a.handle || '', since: a.since || '' })) };
    if (sel.addr) highlight(sel.addr, fresh);
  }

  function drawAddrGrid(canvas, d, byOrd, cols, s, hl) {
    const rows = Math.ceil(d.size / cols);
    const ctx = sizeCanvas(canvas, cols * s, rows * s);
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, cols * s, rows * s);
    const gap = s >= 6 ? 1 : 0, w = s - gap;
    const cells = {};
    for (let ord = 0; ord < d.size; ord++) {
      const x = (ord % cols) * s, y = Math.floor(ord / cols) * s;
      const a = byOrd.get(ord);
      const state = a ? a.state : 'free';
      let fill;
      switch (state) {
        case 'free': fill = C.free; break;
        case 'reserved': fill = C.noroom; break;
        case 'orphan': fill = C.orphan; break;
        case 'leak': fill = C.leak; break;
        default: fill = colorOf(a.node || d.node);
      }
      ctx.fillStyle = fill;
      ctx.fillRect(x, y, w, w);
      if (state === 'free' && w >= 5) { ctx.strokeStyle = C.freeLine; ctx.lineWidth = 1; ctx.strokeRect(x + 0.5, y + 0.5, w - 1, w - 1); }
      if (state === 'reserved' && w >= 6) hatch(ctx, x, y, w, w);
      if (state === 'leak' && w >= 6) { ctx.strokeStyle = '#000'; ctx.lineWidth = 1; ctx.strokeRect(x + 0.5, y + 0.5, w - 1, w - 1); }
      if (state === 'borrowed') {
        const m = Math.max(3, Math.round(w * 0.45));
        ctx.fillStyle = C.borrowed;
        ctx.beginPath(); ctx.moveTo(x + w - m, y); ctx.lineTo(x + w, y); ctx.lineTo(x + w, y + m); ctx.closePath(); ctx.fill();
      }
      if (a) cells[a.addr] = { x, y, w, state, color: fill };
    }
    if (hl && cells[hl]) {
      const c = cells[hl];
      ctx.strokeStyle = C.select; ctx.lineWidth = 2; ctx.strokeRect(c.x - 1, c.y - 1, c.w + 2, c.w + 2);
    }
    return cells;
  }

  function highlight(addr, scroll = true) {
    for (const tr of document.querySelectorAll('#detail tr.hl')) tr.classList.remove('hl');
    if (!addr) return;
    const tr = document.querySelector(`#detail tr[data-addr="${CSS.escape(addr)}"]`);
    if (tr) { tr.classList.add('hl'); if (scroll) tr.scrollIntoView({ block: 'nearest' }); }
    if (ipkMap.detail) ipkMap.detail.highlighted = addr;
  }

  // ---- nodes ----
  function renderNodes() {
    const tbody = $('#nodetable tbody');
    const all = (st.nodes && st.nodes.nodes) || [];
    const f = $('#nodefilter').value.trim().toLowerCase();
    const key = st.nodeSort;
    let list = f ? all.filter((n) => n.name.toLowerCase().includes(f)) : all.slice();
    const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    list.sort((a, b) => (key === 'name' ? byName(a, b) : b[key] - a[key] || byName(a, b)));
    const limit = st.nodeAll || f ? list.length : 50;
    const shown = list.slice(0, limit);
    tbody.replaceChildren(...shown.map((n) => {
      const tr = el('tr', { 'data-node': n.name, class: st.focusNode === n.name ? 'focus' : '' },
        el('td', {}, el('span', { class: 'swatch', style: `background:${n.color}` }), n.name),
        el('td', { class: 'num', text: fmt(n.blocks) }), el('td', { class: 'num', text: fmt(n.inUse) }),
        el('td', { class: 'num', text: fmt(n.borrowed) }), el('td', { class: 'num', text: fmt(n.lent) }),
        el('td', { class: 'num', text: fmt(n.handles) }));
      tr.onclick = () => focusNode(st.focusNode === n.name ? null : n.name);
      return tr;
    }));
    $('#nodecount').textContent = `${fmt(all.length)}`;
    const more = $('#allnodes');
    more.hidden = list.length <= limit;
    more.textContent = `show all ${fmt(list.length)}`;
  }

  function focusNode(name) {
    st.focusNode = name;
    ipkMap.focusNode = name;
    renderNodes();
    renderPools();
  }

  // ---- search ----
  let searchSeq = 0, results = [], active = -1;
  async function search(q, go) {
    const seq = ++searchSeq;
    const ul = $('#results');
    if (!q.trim()) { ul.hidden = true; results = []; return; }
    let r;
    try { r = await getJSON('api/search?q=' + encodeURIComponent(q)); } catch (e) { r = { results: [], error: e.message }; }
    if (seq !== searchSeq) return;
    results = r.results || [];
    active = results.length ? 0 : -1;
    ipkMap.search = { query: q, results: results.map((x) => x.label) };
    if (go && results.length) { jump(results[0]); return; }
    ul.replaceChildren(...(results.length ? results.map((x, i) => {
      const li = el('li', { class: i === active ? 'active' : '' }, el('span', { class: 'kind', text: x.kind }), el('span', { text: x.label }));
      li.onmousedown = (e) => { e.preventDefault(); jump(x); };
      return li;
    }) : [el('li', { class: 'none', text: r.error || 'nothing found' })]), ...(r.more ? [el('li', { class: 'none', text: 'more results left out: refine the search' })] : []));
    ul.hidden = false;
  }

  function jump(r) {
    $('#results').hidden = true;
    if (r.kind === 'node') focusNode(r.node);
    if (r.block && r.pool) select({ pool: r.pool, cidr: r.block, addr: r.addr || null }, true);
  }

  function wire() {
    const q = $('#q');
    let timer = 0;
    q.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => search(q.value, false), 150); });
    q.addEventListener('keydown', (e) => {
      const items = [...document.querySelectorAll('#results li:not(.none)')];
      if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault();
        if (!items.length) return;
        active = (active + (e.key === 'ArrowDown' ? 1 : items.length - 1)) % items.length;
        items.forEach((li, i) => li.classList.toggle('active', i === active));
      } else if (e.key === 'Escape') {
        $('#results').hidden = true;
      }
    });
    $('#search').addEventListener('submit', (e) => {
      e.preventDefault();
      clearTimeout(timer);
      const ul = $('#results');
      if (!ul.hidden && results[active] && results.length) jump(results[active]); else search(q.value, true);
    });
    q.addEventListener('blur', () => setTimeout(() => { $('#results').hidden = true; }, 150));
    $('#nodefilter').addEventListener('input', renderNodes);
    $('#allnodes').addEventListener('click', () => { st.nodeAll = true; renderNodes(); });
    for (const th of document.querySelectorAll('#nodetable th')) th.addEventListener('click', () => { st.nodeSort = th.dataset.sort; renderNodes(); });
    let rt = 0;
    window.addEventListener('resize', () => { clearTimeout(rt); rt = setTimeout(() => { if (st.ov) renderPools(); }, 150); });
  }

  wire();
  refresh();
  listen();
})();
