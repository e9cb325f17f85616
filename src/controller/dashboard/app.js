// The gpupool dashboard: a small single-page app over the REST API (docs/api.md). Hash
// routes: #/cluster, #/queue, #/jobs/ID, #/usage. Every request is same-origin and carries
// the HttpOnly session cookie that POST /ui/login set; nothing is fetched from elsewhere.
// Text from the API goes into the page through textContent only, never as HTML.
'use strict';

(function () {
  const PAGE_SIZE = 100;
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const TERMINAL = ['SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'LOST'];
  const STATES = ['PENDING', 'ASSIGNED', 'RUNNING'].concat(TERMINAL);
  const session = { user: '', admin: false, csrf: '' };
  let generation = 0;  // the view being drawn; answers for an older one are dropped

  // ---- small DOM helpers ----
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
  }
  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS(SVG_NS, tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
  }
  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') el.textContent = String(v);
      else if (k === 'onclick' || k === 'onchange' || k === 'onsubmit') el[k] = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  function append(el, kids) {
    for (const k of kids.flat()) {
      if (k === undefined || k === null || k === false) continue;
      el.appendChild(typeof k === 'string' || typeof k === 'number' ? document.createTextNode(String(k)) : k);
    }
  }
  function view() { return document.getElementById('view'); }
  function show(...kids) {
    const v = view();
    v.replaceChildren();
    append(v, kids);
  }
  function fmtTime(us) {
    if (!us) return '';
    const d = new Date(us / 1000);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }
  function fmtNum(x, digits) { return Number(x || 0).toFixed(digits === undefined ? 2 : digits); }
  // GPU-hours: two decimals, or two significant digits below 0.1 (a short test job).
  function fmtHours(x) {
    const v = Number(x || 0);
    return v === 0 || v >= 0.1 ? v.toFixed(2) : v.toPrecision(2);
  }
  function gpusOf(job) {
    const r = job.request || {};
    if ((r.gpus || 0) === 0) return '0';
    const share = r.gpu_milli && r.gpu_milli < 1000 ? `${fmtNum(r.gpu_milli / 1000, 3).replace(/0+$/, '')}×` : '';
    const tasks = (r.tasks || 1) > 1 ? ` ×${r.tasks} tasks` : '';
    return `${share}${r.gpus}${tasks}`;
  }
  function stateBadge(s) { return h('span', { class: `state ${s}`, text: s }); }

  // ---- the API ----
  class Unauthorized extends Error {}
  async function api(path, options) {
    const opts = Object.assign({ credentials: 'same-origin', headers: {} }, options || {});
    const r = await fetch(path, opts);
    if (r.status === 401) {
      showLogin('Your session has ended: sign in again.');
      throw new Unauthorized(path);
    }
    const type = r.headers.get('Content-Type') || '';
    const body = type.startsWith('application/json') ? await r.json() : await r.text();
    return { status: r.status, body, headers: r.headers };
  }
  function errorOf(res) {
    return (res.body && res.body.error) || `HTTP ${res.status}`;
  }

  // ---- sign-in ----
  function showLogin(message) {
    session.user = '';
    document.getElementById('login').hidden = false;
    document.getElementById('nav').hidden = true;
    document.getElementById('logout').hidden = true;
    document.getElementById('me').textContent = '';
    document.getElementById('login-error').textContent = message || '';
    view().replaceChildren();
  }
  function signedIn(s) {
    session.user = s.user;
    session.admin = !!s.admin;
    session.csrf = s.csrf || '';
    document.getElementById('login').hidden = true;
    document.getElementById('nav').hidden = false;
    document.getElementById('logout').hidden = false;
    document.getElementById('me').textContent = `${s.user}${s.admin ? ' (admin)' : ''}`;
  }
  async function login(ev) {
    ev.preventDefault();
    const input = document.getElementById('login-token');
    const r = await fetch('/ui/login', {
      method: 'POST', credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ token: input.value.trim() }),
    });
    const body = await r.json().catch(() => ({}));
    if (r.status !== 200) {
      document.getElementById('login-error').textContent = body.error || `sign-in failed (HTTP ${r.status})`;
      return;
    }
    input.value = '';
    signedIn(body);
    route();
  }
  async function logout() {
    await fetch('/ui/logout', { method: 'POST', credentials: 'same-origin', headers: { 'X-Gpupool-CSRF': session.csrf } });
    session.csrf = '';
    showLogin('Signed out.');
  }

  // ---- charts (inline SVG) ----
  // Horizontal bars: rows [{label, value, value2?}]; value2 (e.g. GPU-hours used) is drawn
  // as a thinner bar inside.
  function barChart(rows, opts) {
    const width = opts.width || 560;
    const labelW = 140;
    const rowH = 22;
    const height = rows.length * rowH + 24;
    const max = Math.max(1e-9, ...rows.map((r) => Math.max(r.value, r.value2 || 0)));
    const scale = (v) => (v / max) * (width - labelW - 120);
    const g = svg('svg', { class: 'chart', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': opts.title, id: opts.id });
    g.appendChild(svg('title', { text: opts.title }));
    rows.forEach((r, i) => {
      const y = 8 + i * rowH;
      g.appendChild(svg('text', { x: labelW - 6, y: y + 14, 'text-anchor': 'end', text: r.label }));
      g.appendChild(svg('rect', { class: 'bar', x: labelW, y, width: Math.max(1, scale(r.value)), height: rowH - 6 }, svg('title', { text: `${r.label}: ${fmtHours(r.value)} ${opts.unit}` })));
      if (r.value2 !== undefined) {
        g.appendChild(svg('rect', { class: 'bar2', x: labelW, y: y + 6, width: Math.max(1, scale(r.value2)), height: rowH - 18 }));
      }
      g.appendChild(svg('text', { x: labelW + scale(r.value) + 6, y: y + 14, text: `${fmtHours(r.value)} ${opts.unit}` }));
    });
    return g;
  }
  // Columns over time: points [{label, value}].
  function columnChart(points, opts) {
    const width = opts.width || 560;
    const height = 180;
    const left = 44;
    const bottom = 22;
    const max = Math.max(1e-9, ...points.map((p) => p.value));
    const colW = (width - left - 8) / Math.max(1, points.length);
    const g = svg('svg', { class: 'chart', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': opts.title, id: opts.id });
    g.appendChild(svg('title', { text: opts.title }));
    g.appendChild(svg('line', { class: 'axis', x1: left, y1: height - bottom, x2: width - 4, y2: height - bottom }));
    g.appendChild(svg('text', { x: 2, y: 12, text: `${fmtHours(max)} ${opts.unit}` }));
    points.forEach((p, i) => {
      const hgt = (p.value / max) * (height - bottom - 20);
      const x = left + i * colW + 2;
      g.appendChild(svg('rect', { class: 'bar', x, y: height - bottom - hgt, width: Math.max(1, colW - 4), height: Math.max(0, hgt) }, svg('title', { text: `${p.label}: ${fmtHours(p.value)} ${opts.unit}` })));
      if (points.length <= 16 || i % 2 === 0) {
        g.appendChild(svg('text', { x: x + colW / 2 - 2, y: height - 6, 'text-anchor': 'middle', text: p.label }));
      }
    });
    return g;
  }
  // A line over time: points [{t_ms, value}] on 0..100 %.
  function lineChart(points, opts) {
    const width = opts.width || 560;
    const height = 180;
    const left = 36;
    const bottom = 22;
    const t0 = points[0].t_ms;
    const t1 = Math.max(t0 + 1, points[points.length - 1].t_ms);
    const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - 8);
    const y = (v) => height - bottom - (Math.min(100, Math.max(0, v)) / 100) * (height - bottom - 10);
    const g = svg('svg', { class: 'chart', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': opts.title, id: opts.id });
    g.appendChild(svg('title', { text: opts.title }));
    g.appendChild(svg('line', { class: 'axis', x1: left, y1: height - bottom, x2: width - 4, y2: height - bottom }));
    g.appendChild(svg('line', { class: 'axis', x1: left, y1: 10, x2: left, y2: height - bottom }));
    g.appendChild(svg('text', { x: 2, y: 14, text: '100%' }));
    g.appendChild(svg('text', { x: 2, y: height - bottom, text: '0%' }));
    g.appendChild(svg('text', { x: left, y: height - 6, text: fmtTime(t0 * 1000) }));
    g.appendChild(svg('text', { x: width - 8, y: height - 6, 'text-anchor': 'end', text: fmtTime(t1 * 1000) }));
    const d = points.map((p, i) => `${i ? 'L' : 'M'}${x(p.t_ms).toFixed(1)},${y(p.value).toFixed(1)}`).join(' ');
    g.appendChild(svg('path', { class: 'line', d }));
    return g;
  }
  // GET /v1/telemetry?QUERY as a utilisation plot, or a note when there is none (the
  // endpoint is absent on controllers without telemetry, or it has no points yet).
  async function telemetryPlot(query, title, id) {
    const box = h('div', { id });
    const res = await api(`/v1/telemetry?${query}`);
    const points = res.status === 200 && res.body && Array.isArray(res.body.points) ? res.body.points : [];
    const usable = points.filter((p) => typeof p.util_pct === 'number');
    if (usable.length === 0) {
      box.appendChild(h('p', { class: 'muted no-telemetry', text: 'No telemetry yet: the nodes report no GPU utilisation.' }));
      return box;
    }
    box.appendChild(lineChart(usable.map((p) => ({ t_ms: p.t_ms, value: p.util_pct })), { title, id: `${id}-chart` }));
    return box;
  }

  // ---- pages ----
  async function clusterPage(gen) {
    const res = await api('/v1/nodes');
    if (gen !== generation) return;
    if (res.status !== 200) return show(h('p', { class: 'error', text: errorOf(res) }));
    const nodes = res.body.nodes || [];
    let gpus = 0;
    let allocated = 0;
    const rows = nodes.map((n) => {
      const cells = (n.gpus || []).map((g) => {
        gpus += 1;
        allocated += g.allocated_milli / 1000;
        const t = g.telemetry;
        const fill = h('div', { class: 'fill' });
        fill.style.height = `${Math.min(100, g.allocated_milli / 10)}%`;
        const lines = [`GPU ${g.index}`, `${fmtNum(g.allocated_milli / 1000, 2)} allocated`];
        const tip = [`${g.name} (${g.uuid})`, `allocated: ${g.allocated_milli / 10}%`];
        // How a share of it is held to its size (docs/sharing.md): mps, mig, dmem or none.
        if (g.enforcement) tip.push(`share enforcement: ${g.enforcement}`);
        // A GPU in MIG mode: its instances, each held whole by one job or free.
        const mig = Array.isArray(g.mig_devices) ? g.mig_devices : [];
        if (mig.length) {
          lines.push(`MIG ${mig.filter((m) => m.job).length}/${mig.length} held`);
          for (const m of mig) tip.push(`MIG ${m.profile} (${m.uuid}): ${m.job ? `job ${m.job}` : 'free'}`);
        }
        let util = null;
        if (t && typeof t.util_pct === 'number') {
          util = h('div', { class: 'util' });
          util.style.width = `${Math.min(100, t.util_pct)}%`;
          util.style.background = t.util_pct >= 50 ? 'var(--ok)' : t.util_pct >= 10 ? 'var(--warn)' : 'var(--bad)';
          lines.push(`util ${Math.round(t.util_pct)}%`);
          tip.push(`utilisation ${t.util_pct}%`, `memory ${t.mem_used_mib}/${t.mem_total_mib} MiB`,
            `power ${t.power_w} W`, `temperature ${t.temp_c} °C`);
          if (typeof t.xid_errors === 'number') {
            tip.push(`last Xid ${t.xid_errors}` + (typeof t.xid_count === 'number' ? ` (${t.xid_count} since the agent started)` : ''));
          }
          if (typeof t.ecc_uncorrected === 'number') tip.push(`uncorrected ECC errors ${t.ecc_uncorrected}`);
        }
        // GPU health (docs/health.md): only GPUs that are not healthy carry it.
        const health = g.health && g.health.state ? g.health : null;
        if (health) {
          lines[1] = health.state;  // in place of the share (the fill and tooltip show it): the cell is small
          tip.push(`health: ${health.state}: ${health.reason || ''}`, `by ${health.by || ''}` +
            (health.since_us ? ` since ${new Date(health.since_us / 1000).toLocaleString()}` : ''));
          if (health.evidence) tip.push(`evidence: ${health.evidence}`);
        }
        return h('div', {
          class: health ? `gpu health-${health.state}` : 'gpu', title: tip.join('\n'),
          dataset: { node: n.name, index: g.index, allocatedMilli: g.allocated_milli, utilPct: t && typeof t.util_pct === 'number' ? t.util_pct : '',
            health: health ? health.state : 'healthy', healthReason: health ? health.reason || '' : '',
            enforcement: g.enforcement || '', mig: mig.map((m) => `${m.profile}:${m.job || ''}`).join(' ') },
        }, fill, util, h('div', { class: 'label' }, lines.map((l) => h('div', { text: l }))));
      });
      const unhealthy = (n.gpus || []).filter((g) => g.health && g.health.state && g.health.state !== 'healthy');
      const modes = [...new Set((n.gpus || []).map((g) => g.enforcement).filter((m) => m))];
      return h('div', { class: `node ${n.state}`, dataset: { node: n.name } },
        h('div', { class: 'meta' },
          h('div', { class: 'name', text: n.name }), ' ', stateBadge(n.state),
          h('div', { class: 'muted', text: `${n.running_jobs} tasks · CPU ${fmtNum(n.cpu_allocated_milli / 1000, 1)}/${fmtNum(n.cpu_milli / 1000, 1)} · mem ${n.memory_allocated_mib}/${n.memory_mib} MiB` }),
          n.drain_reason ? h('div', { class: 'muted', text: `drained: ${n.drain_reason}` }) : null,
          n.health_check_pending ? h('div', { class: 'muted', text: 'waiting for its health check: no new work yet' }) : null,
          modes.length ? h('div', { class: 'muted enforcement', text: `GPU shares: ${modes.map((m) => m === 'none' ? 'not enforced (none)' : `enforced by ${m}`).join(', ')}` }) : null,
          unhealthy.length ? h('div', { class: 'health-list' }, unhealthy.map((g) => h('div', {
            class: `health-${g.health.state}`, text: `GPU ${g.index} ${g.health.state}: ${g.health.reason || ''}` }))) : null),
        h('div', { class: 'gpus' }, cells));
    });
    show(h('h1', { text: 'Cluster' }),
      h('p', { id: 'cluster-summary', text: `${nodes.length} nodes · ${gpus} GPUs · ${fmtNum(allocated, 2)} allocated` }),
      h('div', { class: 'legend' }, h('span', {}, h('i', { class: 'a' }), 'allocated share (fills the cell)'),
        h('span', {}, h('i', { class: 'f' }), 'free'), h('span', {}, h('i', { class: 'u' }), 'utilisation (top bar, when telemetry exists)')),
      nodes.length ? h('div', { class: 'nodes', id: 'nodes' }, rows) : h('p', { class: 'muted', text: 'No nodes have registered.' }));
  }

  function parseQuery(q) {
    const out = {};
    for (const [k, v] of new URLSearchParams(q || '')) out[k] = v;
    return out;
  }

  async function queuePage(gen, q) {
    const page = Math.max(0, parseInt(q.page || '0', 10) || 0);
    const stateFilter = q.state || '';
    const userFilter = q.user || '';
    const params = new URLSearchParams({ limit: String(PAGE_SIZE + 1), offset: String(page * PAGE_SIZE) });
    if (stateFilter) params.set('state', stateFilter);
    if (userFilter) params.set('user', userFilter);
    else if (session.admin) params.set('all', '1');
    const res = await api(`/v1/jobs?${params}`);
    if (gen !== generation) return;
    const go = (changes) => {
      const next = Object.assign({ state: stateFilter, user: userFilter, page: '0' }, changes);
      for (const k of Object.keys(next)) if (!next[k] || next[k] === '0') delete next[k];
      location.hash = `#/queue${Object.keys(next).length ? '?' + new URLSearchParams(next) : ''}`;
    };
    const stateSel = h('select', { id: 'filter-state', onchange: () => go({ state: stateSel.value }) },
      h('option', { value: '', text: 'all states' }),
      STATES.map((s) => h('option', { value: s, text: s, selected: s === stateFilter })),
      h('option', { value: 'PENDING,ASSIGNED,RUNNING', text: 'active', selected: stateFilter === 'PENDING,ASSIGNED,RUNNING' }));
    const userInput = h('input', { id: 'filter-user', placeholder: session.admin ? 'all users' : session.user, value: userFilter, size: 12 });
    userInput.onchange = () => go({ user: userInput.value.trim() });
    const filters = h('div', { class: 'filters' }, h('label', {}, 'State ', stateSel), h('label', {}, 'User ', userInput));
    if (res.status !== 200) return show(h('h1', { text: 'Queue' }), filters, h('p', { class: 'error', id: 'queue-error', text: errorOf(res) }));
    const jobs = res.body.jobs || [];
    const more = jobs.length > PAGE_SIZE;
    const rows = jobs.slice(0, PAGE_SIZE).map((j) => h('tr', { dataset: { jobId: j.id, user: j.user, state: j.state } },
      h('td', { class: 'num' }, h('a', { href: `#/jobs/${j.id}`, text: j.id })),
      h('td', { text: j.user }), h('td', { text: j.project || '' }), h('td', { text: j.name || (j.command || []).join(' ') }),
      h('td', {}, stateBadge(j.state)), h('td', { class: 'num', text: gpusOf(j) }),
      h('td', { text: (j.placement || []).map((p) => p.node).filter((v, i, a) => a.indexOf(v) === i).join(', ') }),
      h('td', { text: fmtTime(j.submit_time_us) }),
      h('td', { class: 'reason', text: (j.preempted_by ? `preempted by job ${j.preempted_by}: stopping` : j.state === 'PENDING' ? j.pending_reason || '' : j.reason || '') + (j.preemptions ? ` [preempted ${j.preemptions}x]` : '') })));
    const pager = h('div', { class: 'pager' },
      h('button', { id: 'page-prev', disabled: page === 0, onclick: () => go({ page: String(page - 1) }), text: '← newer' }),
      h('span', { id: 'page-info', text: jobs.length ? `jobs ${page * PAGE_SIZE + 1}–${page * PAGE_SIZE + Math.min(PAGE_SIZE, jobs.length)}` : 'no jobs' }),
      h('button', { id: 'page-next', disabled: !more, onclick: () => go({ page: String(page + 1) }), text: 'older →' }));
    show(h('h1', { text: 'Queue' }), filters, pager,
      h('table', { id: 'queue-table' },
        h('thead', {}, h('tr', {}, ['id', 'user', 'project', 'name', 'state', 'GPUs', 'nodes', 'submitted', 'reason'].map((c) => h('th', { text: c })))),
        h('tbody', {}, rows)));
    document.body.dataset.queueRendered = String(rows.length);
    if (window.performance && performance.mark) performance.mark('queue-rendered');
  }

  async function jobPage(gen, id) {
    const res = await api(`/v1/jobs/${id}`);
    if (gen !== generation) return;
    if (res.status !== 200) return show(h('h1', { text: `Job ${id}` }), h('p', { class: 'error', id: 'job-error', text: errorOf(res) }));
    const j = res.body.job;
    const r = j.request || {};
    const field = (k, v) => [h('dt', { text: k }), h('dd', { text: v === undefined || v === null ? '' : String(v) })];
    const fields = h('dl', { class: 'fields', id: 'job-fields' },
      field('id', j.id), field('user', j.user), field('project', j.project), field('name', j.name),
      field('state', j.state), field(j.state === 'PENDING' ? 'pending reason' : 'reason', j.state === 'PENDING' ? j.pending_reason : j.reason),
      field('command', (j.command || []).join(' ')), field('GPUs', gpusOf(j)),
      field('CPU', r.cpu_milli ? `${r.cpu_milli / 1000} cores` : ''), field('priority', j.priority),
      field('submitted', fmtTime(j.submit_time_us)), field('started', fmtTime(j.start_time_us)), field('ended', fmtTime(j.end_time_us)),
      field('exit code', j.exit_code), field('attempt', j.attempt),
      field('preemptible', j.preemptible ? 'yes' : 'no'),
      j.preempted_by ? field('preempted by', `job ${j.preempted_by}; SIGKILL at ${fmtTime(j.preempt_deadline_s * 1e6)}`) : [],
      field('preemptions', j.preemptions ? `${j.preemptions}, costing ${fmtNum(j.preempted_gpu_hours, 3)} GPU-hours` : '0'));
    const placement = (j.placement || []).map((p, t) => h('tr', {},
      h('td', { class: 'num', text: t }), h('td', { text: p.node }),
      h('td', { text: (p.gpu_indices || []).join(', ') }),
      h('td', { class: 'num', text: p.gpu_milli ? fmtNum(p.gpu_milli / 1000, 3) : '' }),
      h('td', { text: ((j.tasks || [])[t] || {}).host || '' })));
    let util = null;
    if (j.gpu_util) {
      const u = j.gpu_util;
      util = h('dl', { class: 'fields', id: 'job-gpu-util' }, field('mean utilisation', `${fmtNum(u.mean_pct, 1)}%`),
        field('peak utilisation', `${fmtNum(u.peak_pct, 1)}%`), field('peak memory', `${u.peak_mem_mib} MiB`),
        field('idle', u.idle ? `yes, since ${fmtTime((u.idle_since_ms || 0) * 1000)}` : 'no'));
    }
    const tasks = Math.max(1, r.tasks || 1);
    const taskSel = h('select', { id: 'log-task' }, Array.from({ length: tasks }, (_, t) => h('option', { value: t, text: `task ${t}` })));
    const streamSel = h('select', { id: 'log-stream' }, h('option', { value: 'stdout', text: 'stdout' }), h('option', { value: 'stderr', text: 'stderr' }));
    const log = h('pre', { class: 'log', id: 'job-log', text: 'loading…' });
    const loadLog = async () => {
      const lr = await api(`/v1/jobs/${id}/logs?task=${taskSel.value}&stream=${streamSel.value}`);
      if (lr.status !== 200) { log.textContent = errorOf(lr); return; }
      const lines = String(lr.body).split('\n');
      const tail = lines.slice(Math.max(0, lines.length - 200)).join('\n');
      log.textContent = tail || '(empty)';
    };
    taskSel.onchange = loadLog;
    streamSel.onchange = loadLog;
    const actions = h('div', { class: 'filters' });
    if (!TERMINAL.includes(j.state)) {
      actions.appendChild(h('button', {
        id: 'job-cancel', text: 'Cancel job',
        onclick: async () => {
          if (!window.confirm(`Cancel job ${j.id}?`)) return;
          const cr = await api(`/v1/jobs/${j.id}/cancel`, { method: 'POST', headers: { 'X-Gpupool-CSRF': session.csrf } });
          if (cr.status !== 200) window.alert(errorOf(cr));
          route();
        },
      }));
    }
    show(h('h1', {}, `Job ${j.id} `, stateBadge(j.state)), actions,
      h('div', { class: 'cards' },
        h('div', { class: 'card' }, h('h2', { text: 'Fields' }), fields),
        h('div', { class: 'card' }, h('h2', { text: 'Placement' }),
          placement.length ? h('table', { id: 'job-placement' }, h('thead', {}, h('tr', {}, ['task', 'node', 'GPUs', 'share', 'host'].map((c) => h('th', { text: c })))), h('tbody', {}, placement))
            : h('p', { class: 'muted', text: 'Not placed.' }),
          h('h2', { text: 'GPU utilisation' }), util, h('div', { id: 'job-telemetry-slot' }))),
      h('h2', { text: 'Log (last 200 lines)' }),
      h('div', { class: 'filters' }, taskSel, streamSel, h('button', { onclick: loadLog, text: 'Refresh' })), log);
    await loadLog();
    if (gen !== generation) return;
    const plot = await telemetryPlot(`job=${encodeURIComponent(id)}`, `GPU utilisation of job ${id}`, 'job-telemetry');
    const slot = document.getElementById('job-telemetry-slot');
    if (slot && gen === generation) slot.replaceChildren(plot);
  }

  async function usagePage(gen) {
    const day = 24 * 3600 * 1e6;
    const now = Date.now() * 1000;
    const today = Math.floor(now / day) * day;
    const days = Array.from({ length: 14 }, (_, i) => today - (13 - i) * day);
    const [byUser, byProject, ...perDay] = await Promise.all([
      api('/v1/usage?by=user'), api('/v1/usage?by=project'),
      ...days.map((d) => api(`/v1/usage?by=user&since_us=${d}&until_us=${Math.min(d + day, now)}`)),
    ]);
    if (gen !== generation) return;
    if (byUser.status !== 200) return show(h('h1', { text: 'Usage' }), h('p', { class: 'error', text: errorOf(byUser) }));
    const rowsOf = (res) => ((res.body && res.body.rows) || []).map((r) => ({
      label: r.key || '(none)', value: r.gpu_hours, value2: typeof r.used_gpu_hours === 'number' ? r.used_gpu_hours : undefined, jobs: r.jobs, efficiency: r.efficiency,
    })).sort((a, b) => b.value - a.value);
    const users = rowsOf(byUser);
    const projects = rowsOf(byProject);
    const daily = days.map((d, i) => ({
      label: new Date(d / 1000).toISOString().slice(5, 10),
      value: ((perDay[i].body && perDay[i].body.rows) || []).reduce((s, r) => s + r.gpu_hours, 0),
    }));
    const table = (rows, id) => h('table', { id }, h('thead', {}, h('tr', {}, ['key', 'GPU-hours', 'used GPU-hours', 'efficiency', 'jobs'].map((c) => h('th', { text: c })))),
      h('tbody', {}, rows.map((r) => h('tr', {}, h('td', { text: r.label }), h('td', { class: 'num', text: fmtHours(r.value) }),
        h('td', { class: 'num', text: r.value2 === undefined ? '–' : fmtHours(r.value2) }),
        h('td', { class: 'num', text: typeof r.efficiency === 'number' ? `${fmtNum(r.efficiency * 100, 0)}%` : '–' }),
        h('td', { class: 'num', text: r.jobs })))));
    const chartOrNote = (rows, title, id) => rows.length ? barChart(rows, { title, id, unit: 'GPU-h' }) : h('p', { class: 'muted', text: 'No GPU-hours in the last 30 days.' });
    show(h('h1', { text: 'Usage' }),
      h('p', { class: 'muted', text: session.admin ? 'Every user, the last 30 days.' : 'Your jobs, the last 30 days.' }),
      h('div', { class: 'cards' },
        h('div', { class: 'card' }, h('h2', { text: 'GPU-hours by user' }), chartOrNote(users, 'GPU-hours by user', 'usage-by-user'), table(users, 'usage-user-table')),
        h('div', { class: 'card' }, h('h2', { text: 'GPU-hours by project' }), chartOrNote(projects, 'GPU-hours by project', 'usage-by-project'), table(projects, 'usage-project-table')),
        h('div', { class: 'card' }, h('h2', { text: 'Allocated GPU-hours per day (14 days)' }), columnChart(daily, { title: 'Allocated GPU-hours per day', id: 'usage-per-day', unit: 'GPU-h' })),
        h('div', { class: 'card' }, h('h2', { text: 'Pool GPU utilisation (24 hours)' }), h('div', { id: 'pool-telemetry-slot' }))));
    const plot = await telemetryPlot(`since_ms=${Date.now() - 24 * 3600 * 1000}&step_s=300`, 'Pool GPU utilisation', 'pool-telemetry');
    const slot = document.getElementById('pool-telemetry-slot');
    if (slot && gen === generation) slot.replaceChildren(plot);
  }

  // ---- routing ----
  async function route() {
    const gen = ++generation;
    delete document.body.dataset.queueRendered;
    const hash = location.hash || '#/cluster';
    const [path, query] = hash.slice(1).split('?');
    const parts = path.split('/').filter(Boolean);
    for (const a of document.querySelectorAll('header nav a')) a.classList.toggle('active', a.id === `nav-${parts[0] || 'cluster'}`);
    try {
      if (parts[0] === 'queue') await queuePage(gen, parseQuery(query));
      else if (parts[0] === 'jobs' && /^\d+$/.test(parts[1] || '')) await jobPage(gen, parts[1]);
      else if (parts[0] === 'usage') await usagePage(gen);
      else await clusterPage(gen);
    } catch (e) {
      if (!(e instanceof Unauthorized) && gen === generation) show(h('p', { class: 'error', text: `error: ${e.message}` }));
    }
  }

  async function boot() {
    document.getElementById('login-form').onsubmit = login;
    document.getElementById('logout').onclick = logout;
    const r = await fetch('/ui/session', { credentials: 'same-origin' });
    const s = await r.json().catch(() => ({}));
    if (!s.signed_in) return showLogin('');
    signedIn(s);
    route();
  }
  window.addEventListener('hashchange', () => { if (session.user) route(); });
  document.addEventListener('DOMContentLoaded', boot);
})();
