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
  // A job's id as `gpupool queue` prints it: ARRAY_INDEX for an array's element.
  function jobIdText(j) { return j.array_id ? `${j.array_id}_${j.array_index}` : String(j.id); }
  // The job preempting j as its user names it (51_3 for an array's element).
  function preemptorText(j) { return j.preempted_by_name || String(j.preempted_by); }
  // Seconds as `gpupool` prints durations: 45s, 12m05s, 3h02m, 2d04h.
  function fmtDuration(s) {
    if (s === null || s === undefined || !isFinite(s)) return '';
    s = Math.max(0, Math.floor(s));
    const p = (n) => String(n).padStart(2, '0');
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m${p(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h${p(Math.floor(s / 60) % 60)}m`;
    return `${Math.floor(s / 86400)}d${p(Math.floor(s / 3600) % 24)}h`;
  }
  // Time waited before starting (to now for a job not started), and time run (to now for a
  // running job), in seconds; null where it does not apply.
  function waitSeconds(j, nowUs) {
    if (!j.submit_time_us) return null;
    const until = j.start_time_us || j.end_time_us || nowUs;
    return (until - j.submit_time_us) / 1e6;
  }
  function runSeconds(j, nowUs) {
    if (!j.start_time_us) return null;
    return ((j.end_time_us || nowUs) - j.start_time_us) / 1e6;
  }
  // argv as a shell would need it typed (as `gpupool show` prints it): plain words as they
  // are, others in single quotes.
  function shellJoin(argv) {
    return (argv || []).map((a) => {
      a = String(a);
      if (a !== '' && /^[A-Za-z0-9\-_./=:,+@%]+$/.test(a)) return a;
      return `'${a.replace(/'/g, "'\\''")}'`;
    }).join(' ');
  }

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
    clearTimeout(live.timer);
    live.timer = 0;
    live.updatedMs = 0;
    document.getElementById('live').textContent = '';
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
  // GET /v1/telemetry?QUERY as a utilisation plot, or a note saying why there is none: the
  // endpoint is absent on controllers without telemetry, the job has not started (`notYet`),
  // there are no points, or one point only (a job shorter than a sample step).
  async function telemetryPlot(query, title, id, opts) {
    const o = opts || {};
    const box = h('div', { id });
    const note = (text, cls) => { box.appendChild(h('p', { class: `muted ${cls}`, text })); return box; };
    if (o.notYet) return note(o.notYet, 'no-telemetry not-started');
    const res = await api(`/v1/telemetry?${query}`);
    const points = res.status === 200 && res.body && Array.isArray(res.body.points) ? res.body.points : [];
    const usable = points.filter((p) => typeof p.util_pct === 'number' && (!o.untilMs || p.t_ms <= o.untilMs));
    if (usable.length === 0) return note('No telemetry yet: the nodes report no GPU utilisation.', 'no-telemetry');
    if (usable.length < 2) {
      return note(`Too short to plot: one sample (${fmtNum(usable[0].util_pct, 1)}% at ${fmtTime(usable[0].t_ms * 1000)}).`, 'too-short');
    }
    box.appendChild(lineChart(usable.map((p) => ({ t_ms: p.t_ms, value: p.util_pct })), { title, id: `${id}-chart` }));
    return box;
  }

  // A table in its own scrolling box: a wide table scrolls there, not the page.
  function tableBox(table) { return h('div', { class: 'table-box' }, table); }

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
          lines.push(`MIG ${mig.filter((m) => m.job || m.other_user).length}/${mig.length} held`);
          // Its holder as its user names it (an array's element ARRAY_INDEX), as in holders.
          for (const m of mig) {
            tip.push(`MIG ${m.profile} (${m.uuid}): ${m.other_user ? "another user's job"
              : m.job ? `job ${jobIdText({ id: m.job, array_id: m.array_id, array_index: m.array_index })}`
                : m.out_of_service ? 'not available (GPU out of service)' : 'free'}`);
          }
        }
        // Why it takes no new work (health, a MIG layout changed under jobs, a stopped job).
        if (g.out_of_service) tip.push(`out of service: ${g.out_of_service}`);
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
          // The hardware health readings the thresholds act on (docs/health.md), when not all-clear.
          const hw = [];
          if (t.retired_pages > 0) hw.push(`${t.retired_pages} retired pages`);
          if (t.retired_pages_pending === true) hw.push('a page retirement waits for a reset');
          if (t.remapped_rows > 0) hw.push(`${t.remapped_rows} remapped rows`);
          if (t.remapped_rows_pending === true) hw.push('a row remapping waits for a reset');
          if (t.remapped_rows_failed === true) hw.push('a row remapping failed (no spare rows)');
          if (t.hw_slowdown === true) hw.push('the hardware slows its clocks');
          if (hw.length) tip.push(`hardware: ${hw.join(', ')}`);
        }
        // GPU health (docs/health.md): only GPUs that are not healthy carry it.
        const health = g.health && g.health.state ? g.health : null;
        if (health) {
          lines[1] = health.state;  // in place of the share (the fill and tooltip show it): the cell is small
          tip.push(`health: ${health.state}: ${health.reason || ''}`, `by ${health.by || ''}` +
            (health.since_us ? ` since ${new Date(health.since_us / 1000).toLocaleString()}` : ''));
          if (health.evidence) tip.push(`evidence: ${health.evidence}`);
        }
        // Who holds it (GET /v1/nodes' holders): each job and its user, every share's;
        // another user's job the caller may not read is only "another user".
        const holders = g.holders || [];
        for (const o of holders) {
          tip.push(o.other_user ? `another user's job: ${fmtNum(o.gpu_milli / 1000, 2)}`
            : `job ${jobIdText({ id: o.job_id, array_id: o.array_id, array_index: o.array_index })} of ${o.user}: ${fmtNum(o.gpu_milli / 1000, 2)}`);
        }
        const who = h('div', { class: 'holders' }, holders.map((o) => o.other_user
          ? h('div', { class: 'holder other', text: 'another user' })
          : h('div', { class: 'holder' }, h('a', { href: `#/jobs/${jobIdText({ id: o.job_id, array_id: o.array_id, array_index: o.array_index })}`, text: jobIdText({ id: o.job_id, array_id: o.array_id, array_index: o.array_index }) }), ` ${o.user}`)));
        return h('div', {
          class: health ? `gpu health-${health.state}` : 'gpu', title: tip.join('\n'),
          dataset: { node: n.name, index: g.index, allocatedMilli: g.allocated_milli, utilPct: t && typeof t.util_pct === 'number' ? t.util_pct : '',
            health: health ? health.state : 'healthy', healthReason: health ? health.reason || '' : '',
            enforcement: g.enforcement || '', mig: mig.map((m) => `${m.profile}:${m.job ? jobIdText({ id: m.job, array_id: m.array_id, array_index: m.array_index }) : ''}`).join(' '),
            holders: holders.map((o) => o.other_user ? `other:${o.gpu_milli}` : `${jobIdText({ id: o.job_id, array_id: o.array_id, array_index: o.array_index })}:${o.user}:${o.gpu_milli}`).join(' ') },
        }, fill, util, h('div', { class: 'label' }, lines.map((l) => h('div', { text: l })), who));
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

  // The queue's columns: key (the API's sort=FIELD, which sorts the whole list on the
  // server; `nosort`: no such field), header, the value shown, and the cell.
  const QUEUE_COLUMNS = [
    { key: 'id', label: 'id', num: true, value: (j) => j.id, cell: (j) => h('a', { href: `#/jobs/${jobIdText(j)}`, text: jobIdText(j) }) },
    { key: 'user', label: 'user', value: (j) => j.user || '' },
    { key: 'project', label: 'project', value: (j) => j.project || '' },
    { key: 'name', label: 'name', value: (j) => j.name || shellJoin(j.command) },
    { key: 'state', label: 'state', value: (j) => j.state, cell: (j) => stateBadge(j.state) },
    { key: 'gpus', label: 'GPUs', num: true, value: (j) => ((j.request || {}).gpus || 0) * ((j.request || {}).gpu_milli || 1000) * ((j.request || {}).tasks || 1), text: gpusOf },
    { key: 'nodes', label: 'nodes', value: (j) => (j.placement || []).map((p) => p.node).filter((v, i, a) => a.indexOf(v) === i).join(', ') },
    { key: 'submitted', label: 'submitted', value: (j) => j.submit_time_us || 0, text: (j) => fmtTime(j.submit_time_us) },
    { key: 'wait', label: 'wait', num: true, value: (j, now) => waitSeconds(j, now), text: (j, now) => fmtDuration(waitSeconds(j, now)) },
    { key: 'runtime', label: 'run time', num: true, value: (j, now) => runSeconds(j, now), text: (j, now) => fmtDuration(runSeconds(j, now)) },
    { key: 'reason', label: 'reason', cls: 'reason', nosort: true, value: (j) => (j.preempted_by ? `preempted by job ${preemptorText(j)}: stopping` : j.state === 'PENDING' ? (j.held_by ? `held by ${j.held_by}` : j.pending_reason || '') : j.reason || '') + (j.preemptions ? ` [preempted ${j.preemptions}x]` : '') },
  ];
  // The queue's state filter: `?state=` in the page's address. None: the active jobs (the
  // API's active=1: pending, held, assigned, running); `all`: every state (no filter sent:
  // the API knows no state "all"); else a state or a comma-separated list of them.
  function queueStateParams(stateFilter, params) {
    if (!stateFilter) params.set('active', '1');
    else if (stateFilter !== 'all') params.set('state', stateFilter);
  }

  async function queuePage(gen, q) {
    const page = Math.max(0, parseInt(q.page || '0', 10) || 0);
    const stateFilter = q.state || '';
    const userFilter = q.user || '';
    const sortKey = QUEUE_COLUMNS.some((c) => c.key === q.sort && !c.nosort) ? q.sort : '';
    const sortDir = q.dir === 'asc' ? 'asc' : 'desc';
    const params = new URLSearchParams({ limit: String(PAGE_SIZE + 1), offset: String(page * PAGE_SIZE) });
    // The server sorts every job that matches, and the pages follow that order.
    if (sortKey) { params.set('sort', sortKey); params.set('order', sortDir); }
    queueStateParams(stateFilter, params);
    if (userFilter) params.set('user', userFilter);
    else if (session.admin) params.set('all', '1');
    const res = await api(`/v1/jobs?${params}`);
    if (gen !== generation) return;
    const current = { state: stateFilter, user: userFilter, page: String(page), sort: sortKey, dir: sortKey ? sortDir : '' };
    const go = (changes) => {
      const next = Object.assign({}, current, { page: '0' }, changes);
      for (const k of Object.keys(next)) if (!next[k] || next[k] === '0') delete next[k];
      location.hash = `#/queue${Object.keys(next).length ? '?' + new URLSearchParams(next) : ''}`;
    };
    const stateSel = h('select', { id: 'filter-state', onchange: () => go({ state: stateSel.value }) },
      h('option', { value: '', text: 'active (pending, held, running)', selected: stateFilter === '' }),
      h('option', { value: 'all', text: 'all states', selected: stateFilter === 'all' }),
      STATES.map((s) => h('option', { value: s, text: s, selected: s === stateFilter })));
    const userInput = h('input', { id: 'filter-user', placeholder: session.admin ? 'all users' : session.user, value: userFilter, size: 12 });
    userInput.onchange = () => go({ user: userInput.value.trim() });
    const filters = h('div', { class: 'filters' }, h('label', {}, 'State ', stateSel), h('label', {}, 'User ', userInput));
    if (res.status !== 200) return show(h('h1', { text: 'Queue' }), filters, h('p', { class: 'error', id: 'queue-error', text: errorOf(res) }));
    const nowUs = Date.now() * 1000;
    const jobs = res.body.jobs || [];
    const more = jobs.length > PAGE_SIZE;
    const shown = jobs.slice(0, PAGE_SIZE);
    const rows = shown.map((j) => h('tr', { dataset: { jobId: j.id, jobName: jobIdText(j), user: j.user, state: j.state } },
      QUEUE_COLUMNS.map((c) => {
        const td = h('td', { class: [c.num ? 'num' : '', c.cls || ''].join(' ').trim() || null, dataset: { col: c.key } });
        if (c.cell) td.appendChild(c.cell(j, nowUs));
        else td.textContent = String(c.text ? c.text(j, nowUs) : c.value(j, nowUs));
        return td;
      })));
    const headers = QUEUE_COLUMNS.map((c) => {
      if (c.nosort) return h('th', { class: c.num ? 'num' : null, text: c.label });
      const sorted = c.key === sortKey;
      const next = sorted && sortDir === 'desc' ? 'asc' : 'desc';
      return h('th', { class: c.num ? 'num sortable' : 'sortable', dataset: { sort: c.key }, 'aria-sort': sorted ? (sortDir === 'asc' ? 'ascending' : 'descending') : 'none' },
        h('button', { type: 'button', class: 'sort', title: `sort by ${c.label}`, onclick: () => go({ sort: c.key, dir: next }) },
          c.label, sorted ? (sortDir === 'asc' ? ' ▲' : ' ▼') : ''));
    });
    const pager = h('div', { class: 'pager' },
      h('button', { id: 'page-prev', disabled: page === 0, onclick: () => go({ page: String(page - 1) }), text: sortKey ? '← previous' : '← newer' }),
      h('span', { id: 'page-info', text: shown.length ? `jobs ${page * PAGE_SIZE + 1}–${page * PAGE_SIZE + shown.length}` : 'no jobs' }),
      h('button', { id: 'page-next', disabled: !more, onclick: () => go({ page: String(page + 1) }), text: sortKey ? 'next →' : 'older →' }));
    show(h('h1', { text: 'Queue' }), filters, pager,
      tableBox(h('table', { id: 'queue-table' }, h('thead', {}, h('tr', {}, headers)), h('tbody', {}, rows))));
    document.body.dataset.queueRendered = String(rows.length);
    if (window.performance && performance.mark) performance.mark('queue-rendered');
  }

  // What the job page keeps across its refreshes: which job, the log the user picked, and
  // that log's last lines and where its reading got to (a refresh reads only what is new).
  const jobView = { id: '', task: null, stream: null, log: { key: '' } };
  const LOG_LINES = 200;
  const LOG_CHUNKS_PER_DRAW = 8;  // the API answers at most 1 MiB a read
  function lastLines(text, n) {
    const lines = text.split('\n');
    return lines.length > n + 1 ? lines.slice(lines.length - n - 1).join('\n') : text;
  }

  function requestText(r) {
    const parts = [];
    const gpus = r.gpus || 0;
    const milli = r.gpu_milli || 1000;
    if (gpus === 0) parts.push('no GPU');
    else if (r.gpu_memory_bytes) parts.push(`a share of 1 GPU sized by ${fmtNum(r.gpu_memory_bytes / 2 ** 30, 1)} GiB of its memory`);
    else if (milli < 1000) parts.push(`${milli / 1000} of 1 GPU`);
    else parts.push(`${gpus} GPU${gpus === 1 ? '' : 's'}`);
    const cons = [];
    if ((r.gpu_models || []).length) cons.push(`model ${r.gpu_models.join(' or ')}`);
    if (r.vendor) cons.push(`vendor ${r.vendor}`);
    if (r.min_capability) cons.push(`capability >= ${r.min_capability}`);
    if (cons.length) parts[parts.length - 1] += ` (${cons.join(', ')})`;
    parts.push(`${(r.cpu_milli || 1000) / 1000} CPU`);
    if (r.memory_bytes) parts.push(`${fmtNum(r.memory_bytes / 2 ** 30, 1)} GiB memory`);
    if ((r.tasks || 1) !== 1) parts.push(`each of ${r.tasks} tasks`);
    return parts.join(', ');
  }

  async function jobPage(gen, id, refreshing) {
    const res = await api(`/v1/jobs/${id}`);
    if (gen !== generation) return;
    if (res.status !== 200) return show(h('h1', { text: `Job ${id}` }), h('p', { class: 'error', id: 'job-error', text: errorOf(res) }));
    const j = res.body.job;
    const r = j.request || {};
    const nowUs = Date.now() * 1000;
    if (jobView.id !== id) Object.assign(jobView, { id, task: null, stream: null, log: { key: '' } });
    const field = (k, v, key) => (v === undefined || v === null || v === '' ? [] :
      [h('dt', { text: k }), h('dd', { text: String(v), dataset: { field: key || k } })]);
    const deps = (j.dependencies || []).map((d) => `${d.kind} ${d.job_name || d.job_id}`).join(', ');
    const env = j.env || {};
    const envKeys = Object.keys(env);
    const fields = h('dl', { class: 'fields', id: 'job-fields' },
      field('id', jobIdText(j) + (j.array_id && j.id !== j.array_id ? ` (job ${j.id})` : ''), 'id'), field('name', j.name),
      field('user', `${j.user} (uid ${j.uid}, gid ${j.gid})`, 'user'), field('project', j.project),
      field('state', j.state),
      j.state === 'PENDING' ? field('waiting', j.pending_reason, 'pending_reason') : [],
      field('reason', j.reason),
      field('command', shellJoin(j.command), 'command'), field('workdir', j.workdir), field('image', j.image),
      envKeys.length > 8 ? field('environment', `${envKeys.length} variables (gpupool show ${jobIdText(j)} --json lists them)`, 'env')
        : field('environment', envKeys.map((k) => `${k}=${env[k]}`).join('\n'), 'env'),
      j.script ? field('script', `${j.script.length} bytes, copied at submit (gpupool show ${jobIdText(j)} --script)`, 'script') : [],
      field('output', j.output), field('error', j.error),
      field('request', requestText(r), 'request'), field('priority', j.priority),
      field('time limit', j.time_limit_s > 0 ? fmtDuration(j.time_limit_s) : 'none', 'time_limit'),
      field('requeue', j.requeue ? 'yes, if its node is lost or a GPU it holds fails' : 'no'),
      j.enforce_memory ? field('enforce', 'memory (shares only on GPUs that hold it)') : [],
      field('GPU enforcement', j.gpu_enforcement, 'gpu_enforcement'),
      j.mpi ? field('launch', 'mpi: the command runs in task 0, the others are held') : [],
      j.interactive ? field('interactive', j.interactive === 'alloc' ? 'alloc: an allocation held for gpupool exec' : `run: the command runs in task 0 with its client's ${j.pty ? 'terminal (--pty)' : 'stdin and output'}`) : [],
      j.array_id ? field('array', `element ${j.array_index} of array ${j.array_id} (${j.array || ''})${j.array_max_running > 0 ? `, at most ${j.array_max_running} at once` : ''}`, 'array') : [],
      field('depends on', deps, 'dependencies'),
      j.held_by ? field('held', `by ${j.held_by}${j.held_by_admin ? ' (admin)' : ''}`, 'held') : [],
      field('submitted', fmtTime(j.submit_time_us)), field('started', fmtTime(j.start_time_us)), field('ended', fmtTime(j.end_time_us)),
      field('waited', fmtDuration(waitSeconds(j, nowUs)), 'wait'),
      field(j.end_time_us ? 'run time' : 'elapsed', j.start_time_us ? fmtDuration(runSeconds(j, nowUs)) : '', 'elapsed'),
      j.state === 'PENDING' && j.start_estimate_us ? field('planned start', `${fmtTime(j.start_estimate_us)} (in ${fmtDuration((j.start_estimate_us - nowUs) / 1e6)})`, 'start_estimate') : [],
      field('exit code', j.exit_code, 'exit_code'), field('signal', j.signal),
      j.preempted_by ? field('preempted by', `job ${preemptorText(j)}; SIGKILL at ${fmtTime(j.preempt_deadline_s * 1e6)}${j.checkpoint_done ? ' (checkpoint done: now)' : ''}`, 'preempted_by')
        : j.cancel_requested ? field('cancel', 'requested; the job is being stopped') : [],
      field('preemptible', j.preemptible ? ['yes', j.min_runtime_s > 0 ? `min runtime ${fmtDuration(j.min_runtime_s)}` : '', j.preempt_grace_s > 0 ? `grace ${fmtDuration(j.preempt_grace_s)}` : ''].filter(Boolean).join(', ') : 'no'),
      field('preemptions', j.preemptions ? `${j.preemptions}, costing ${fmtNum(j.preempted_gpu_hours, 3)} GPU-hours of work` : '0'),
      field('attempts', j.attempt, 'attempt'),
      j.master_port > 0 ? field('rendezvous', `${((j.tasks || [])[0] || {}).host || ''}:${j.master_port}`) : [],
      field('stdout', j.stdout_path, 'stdout_path'), field('stderr', j.stderr_path, 'stderr_path'));
    const placement = (j.placement || []).map((p, t) => h('tr', {},
      h('td', { class: 'num', text: t }), h('td', { text: p.node }),
      h('td', { text: (p.gpu_indices || []).join(', ') }),
      h('td', { class: 'num', text: p.gpu_milli ? fmtNum(p.gpu_milli / 1000, 3) : '' }),
      h('td', { text: ((j.tasks || [])[t] || {}).host || '' })));
    // Its earlier attempts (requeued: preempted, lost with its node, its GPU failed), oldest
    // first, as `gpupool show` lists them; a merged record stands for several.
    const attempts = (j.earlier_attempts || []).map((a) => {
      const n = a.attempt || 0;
      const merged = a.merged || 1;
      const how = a.ended_by || 'preempted';
      return h('tr', { dataset: { endedBy: how } },
        h('td', { class: 'num', text: n <= 0 ? '' : merged > 1 ? `${n}-${n + merged - 1}` : String(n) }),
        h('td', { text: fmtTime(a.start_time_us) }),
        h('td', { class: 'num', text: fmtDuration(Math.max(0, ((a.end_time_us || 0) - (a.start_time_us || 0)) / 1e6)) }),
        h('td', { class: 'num', text: fmtNum(a.gpu_hours || 0, 3) }),
        h('td', { text: how === 'gpu_failed' ? 'its GPU failed' : how }),
        h('td', { text: a.reason || '' }));
    });
    let util = null;
    if (j.gpu_util) {
      const u = j.gpu_util;
      util = h('dl', { class: 'fields', id: 'job-gpu-util' }, field('mean utilisation', `${fmtNum(u.mean_pct, 1)}%`),
        field('peak utilisation', `${fmtNum(u.peak_pct, 1)}%`), field('peak memory', `${u.peak_mem_mib} MiB`),
        typeof u.used_gpu_hours === 'number' ? field('used', `${fmtHours(u.used_gpu_hours)} GPU-hours`) : [],
        field('idle', u.idle ? `yes, since ${fmtTime((u.idle_since_ms || 0) * 1000)}` : 'no'));
    }
    // The log: a failed job opens on stderr (where its error is), others on stdout, unless
    // the user picked one; stdout and stderr in one file (the default -o) are one choice.
    const tasks = Math.max(1, r.tasks || 1);
    const failed = j.state === 'FAILED' || j.state === 'TIMEOUT';
    const oneFile = !!j.stdout_path && j.stdout_path === j.stderr_path;
    const taskSel = h('select', { id: 'log-task' }, Array.from({ length: tasks }, (_, t) => h('option', { value: t, text: `task ${t}` })));
    const streamSel = h('select', { id: 'log-stream' }, oneFile ? h('option', { value: 'stdout', text: 'stdout and stderr (one file)' })
      : [h('option', { value: 'stdout', text: 'stdout' }), h('option', { value: 'stderr', text: 'stderr' })]);
    taskSel.value = jobView.task !== null ? jobView.task : '0';
    streamSel.value = !oneFile && jobView.stream !== null ? jobView.stream : (failed && !oneFile ? 'stderr' : 'stdout');
    const log = h('pre', { class: 'log', id: 'job-log', text: 'loading…' });
    // Reads on from where the last read ended (from the start when `fresh`, or for another
    // task or stream), up to LOG_CHUNKS_PER_DRAW reads a draw, keeping the last lines.
    const loadLog = async (fresh) => {
      const key = `${j.id}/${taskSel.value}/${streamSel.value}`;
      if (fresh === true || jobView.log.key !== key) jobView.log = { key, offset: 0, text: '', eof: false, read: false };
      const L = jobView.log;
      for (let i = 0; i < LOG_CHUNKS_PER_DRAW && !L.eof; i++) {
        const lr = await api(`/v1/jobs/${j.id}/logs?task=${taskSel.value}&stream=${streamSel.value}&offset=${L.offset}`);
        if (jobView.log !== L) return;  // another log was picked meanwhile
        if (lr.status !== 200) { log.textContent = errorOf(lr); return; }
        const body = String(lr.body);
        const bytes = new TextEncoder().encode(body).length;
        const next = parseInt(lr.headers.get('X-Gpupool-Next-Offset') || '', 10);
        L.offset = Number.isFinite(next) ? next : L.offset + bytes;
        L.eof = lr.headers.get('X-Gpupool-Eof') === '1';
        L.text = lastLines(L.text + body, LOG_LINES);
        L.read = true;
        if (bytes < (1 << 20)) break;  // caught up with the file
      }
      log.textContent = L.text || '(empty)';
    };
    if (jobView.log.key === `${j.id}/${taskSel.value}/${streamSel.value}` && jobView.log.read) log.textContent = jobView.log.text || '(empty)';
    const pick = () => { jobView.task = taskSel.value; jobView.stream = streamSel.value; loadLog(true); };
    taskSel.onchange = pick;
    streamSel.onchange = pick;
    const actions = h('div', { class: 'filters' });
    if (!TERMINAL.includes(j.state)) {
      actions.appendChild(h('button', {
        id: 'job-cancel', text: 'Cancel job',
        onclick: async () => {
          if (!window.confirm(`Cancel job ${jobIdText(j)}?`)) return;
          const cr = await api(`/v1/jobs/${jobIdText(j)}/cancel`, { method: 'POST', headers: { 'X-Gpupool-CSRF': session.csrf } });
          if (cr.status !== 200) window.alert(errorOf(cr));
          route();
        },
      }));
    }
    const oldPlot = refreshing ? document.getElementById('job-telemetry') : null;
    show(h('h1', {}, `Job ${jobIdText(j)} `, stateBadge(j.state)), actions,
      h('div', { class: 'cards' },
        h('div', { class: 'card' }, h('h2', { text: 'Fields' }), fields),
        h('div', { class: 'card' }, h('h2', { text: 'Placement' }),
          placement.length ? tableBox(h('table', { id: 'job-placement' }, h('thead', {}, h('tr', {}, ['task', 'node', 'GPUs', 'share', 'host'].map((c) => h('th', { text: c })))), h('tbody', {}, placement)))
            : h('p', { class: 'muted', text: 'Not placed.' }),
          attempts.length ? [h('h2', { text: 'Earlier attempts' }),
            tableBox(h('table', { id: 'job-attempts' }, h('thead', {}, h('tr', {}, ['attempt', 'started', 'ran', 'GPU-hours', 'ended', 'reason'].map((c) => h('th', { text: c })))), h('tbody', {}, attempts)))] : [],
          h('h2', { text: 'GPU utilisation' }), util, h('div', { id: 'job-telemetry-slot' }, oldPlot))),
      h('h2', { text: 'Log (last 200 lines)' }),
      h('div', { class: 'filters' }, taskSel, streamSel, h('button', { onclick: () => loadLog(true), text: 'Reload log' })), log);
    await loadLog(false);
    if (gen !== generation) return;
    // Not started: say so, whatever the nodes report (a pending job has no samples).
    const notYet = !j.start_time_us && !TERMINAL.includes(j.state) ? 'The job has not started: its GPU utilisation is plotted once it runs.'
      : !j.start_time_us ? 'The job never started: it has no GPU utilisation.' : '';
    const plot = await telemetryPlot(`job=${encodeURIComponent(jobIdText(j))}`, `GPU utilisation of job ${jobIdText(j)}`, 'job-telemetry', { notYet });
    const slot = document.getElementById('job-telemetry-slot');
    if (slot && gen === generation) slot.replaceChildren(plot);
  }

  // The usage page's time ranges (?range=): the last 24 hours, 7 or 30 days, or custom
  // dates (?since=YYYY-MM-DD&until=YYYY-MM-DD, whole days, local time, until included).
  const RANGES = [['24h', 'last 24 hours', 24], ['7d', 'last 7 days', 7 * 24], ['30d', 'last 30 days', 30 * 24]];
  function usageWindow(q, nowMs) {
    const hour = 3600 * 1000;
    const dateMs = (s) => (/^\d{4}-\d{2}-\d{2}$/.test(s || '') ? new Date(`${s}T00:00:00`).getTime() : NaN);
    if (q.range === 'custom') {
      const since = dateMs(q.since);
      const until = dateMs(q.until) + 24 * hour;
      if (isFinite(since) && isFinite(until) && since < until) {
        return { range: 'custom', sinceMs: since, untilMs: Math.min(until, nowMs), label: `${q.since} to ${q.until}` };
      }
      return { range: 'custom', error: 'Pick a start and an end date (the start before the end).' };
    }
    const r = RANGES.find((x) => x[0] === q.range) || RANGES[2];
    return { range: r[0], sinceMs: nowMs - r[2] * hour, untilMs: nowMs, label: r[1] };
  }
  // Columns over the window: hours for a day or less, else days (at most 31 columns).
  function usageBuckets(w) {
    const hour = 3600 * 1000;
    const span = w.untilMs - w.sinceMs;
    const size = span <= 25 * hour ? hour : Math.ceil(span / (24 * hour) / 31) * 24 * hour;
    const out = [];
    for (let t = w.sinceMs; t < w.untilMs; t += size) out.push([t, Math.min(t + size, w.untilMs)]);
    return { size, buckets: out };
  }

  async function usagePage(gen, q) {
    const nowMs = Date.now();
    const w = usageWindow(q, nowMs);
    const go = (changes) => {
      const next = Object.assign({ range: w.range, since: q.since || '', until: q.until || '' }, changes);
      if (next.range !== 'custom') { delete next.since; delete next.until; }
      for (const k of Object.keys(next)) if (!next[k]) delete next[k];
      location.hash = `#/usage?${new URLSearchParams(next)}`;
    };
    const day = (ms) => { const d = new Date(ms); const p = (n) => String(n).padStart(2, '0'); return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`; };
    const rangeSel = h('select', { id: 'usage-range', onchange: () => go(rangeSel.value === 'custom'
      ? { range: 'custom', since: q.since || day(nowMs - 7 * 24 * 3600 * 1000), until: q.until || day(nowMs) } : { range: rangeSel.value }) },
    RANGES.map((x) => h('option', { value: x[0], text: x[1], selected: x[0] === w.range })),
    h('option', { value: 'custom', text: 'custom dates', selected: w.range === 'custom' }));
    const picker = h('div', { class: 'filters', id: 'usage-picker' }, h('label', {}, 'Time range ', rangeSel));
    if (w.range === 'custom') {
      const since = h('input', { type: 'date', id: 'usage-since', value: q.since || '' });
      const until = h('input', { type: 'date', id: 'usage-until', value: q.until || '' });
      since.onchange = () => go({ since: since.value });
      until.onchange = () => go({ until: until.value });
      picker.append(h('label', {}, 'from ', since), h('label', {}, 'to ', until));
    }
    if (w.error) return show(h('h1', { text: 'Usage' }), picker, h('p', { class: 'error', id: 'usage-error', text: w.error }));
    const sinceUs = w.sinceMs * 1000;
    const untilUs = w.untilMs * 1000;
    const { size, buckets } = usageBuckets(w);
    const [byUser, byProject, ...perBucket] = await Promise.all([
      api(`/v1/usage?by=user&since_us=${sinceUs}&until_us=${untilUs}`), api(`/v1/usage?by=project&since_us=${sinceUs}&until_us=${untilUs}`),
      ...buckets.map(([a, b]) => api(`/v1/usage?by=user&shares=0&since_us=${a * 1000}&until_us=${b * 1000}`)),
    ]);
    if (gen !== generation) return;
    if (byUser.status !== 200) return show(h('h1', { text: 'Usage' }), picker, h('p', { class: 'error', id: 'usage-error', text: errorOf(byUser) }));
    const rowsOf = (res) => ((res.body && res.body.rows) || []).map((r) => ({
      // By project, a user's jobs without a project: their own fair-share group, named after them.
      label: r.own_group ? `${r.key} (user's own)` : r.key || '(none)', value: r.gpu_hours, value2: typeof r.used_gpu_hours === 'number' ? r.used_gpu_hours : undefined, jobs: r.jobs, efficiency: r.efficiency,
      // The pool's fair-share groups: their weight and normalised share (sshare's RawShares, NormShares).
      share: typeof r.norm_share === 'number' ? `${Number(r.fair_share)} (${fmtNum(r.norm_share * 100, 1)}%)` : undefined,
    })).sort((a, b) => b.value - a.value);
    const users = rowsOf(byUser);
    const projects = rowsOf(byProject);
    const hourly = size <= 3600 * 1000;
    const columns = buckets.map(([a], i) => ({
      label: hourly ? `${String(new Date(a).getHours()).padStart(2, '0')}h` : day(a).slice(5),
      value: ((perBucket[i].body && perBucket[i].body.rows) || []).reduce((s, r) => s + r.gpu_hours, 0),
    }));
    const table = (rows, id, keyName) => {
      const shares = rows.some((r) => r.share !== undefined);
      const heads = [keyName, 'GPU-hours', 'used GPU-hours', 'efficiency', 'jobs'].concat(shares ? ['fair share'] : []);
      return tableBox(h('table', { id }, h('thead', {}, h('tr', {}, heads.map((c, i) => h('th', { class: i ? 'num' : null, text: c })))),
        h('tbody', {}, rows.map((r) => h('tr', {}, h('td', { text: r.label }), h('td', { class: 'num', text: fmtHours(r.value) }),
          h('td', { class: 'num', text: r.value2 === undefined ? '–' : fmtHours(r.value2) }),
          h('td', { class: 'num', text: typeof r.efficiency === 'number' ? `${fmtNum(r.efficiency * 100, 0)}%` : '–' }),
          h('td', { class: 'num', text: r.jobs }),
          shares ? h('td', { class: 'num', text: r.share === undefined ? '–' : r.share }) : null)))));
    };
    const chartOrNote = (rows, title, id) => rows.length ? barChart(rows, { title, id, unit: 'GPU-h' }) : h('p', { class: 'muted', text: `No GPU-hours in the ${w.range === 'custom' ? 'chosen dates' : w.label}.` });
    const per = hourly ? 'hour' : size === 24 * 3600 * 1000 ? 'day' : `${size / (24 * 3600 * 1000)} days`;
    const oldPlot = document.getElementById('pool-telemetry');
    show(h('h1', { text: 'Usage' }), picker,
      h('p', { class: 'muted', id: 'usage-window', dataset: { sinceUs, untilUs }, text: `${session.admin ? 'Every user' : 'Your jobs'}, ${w.label} (${fmtTime(sinceUs)} to ${fmtTime(untilUs)}).` }),
      h('div', { class: 'cards' },
        h('div', { class: 'card' }, h('h2', { text: 'GPU-hours by user' }), chartOrNote(users, 'GPU-hours by user', 'usage-by-user'), table(users, 'usage-user-table', 'user')),
        // A pool whose fair share is by project (server --fair-by project) names its groups.
        h('div', { class: 'card' }, h('h2', { id: 'usage-project-heading', text: `GPU-hours by project${byUser.body.fair_share_by === 'project' ? ' (fair-share groups)' : ''}` }), chartOrNote(projects, 'GPU-hours by project', 'usage-by-project'), table(projects, 'usage-project-table', 'project')),
        h('div', { class: 'card' }, h('h2', { text: `Allocated GPU-hours per ${per}` }), columnChart(columns, { title: `Allocated GPU-hours per ${per}`, id: 'usage-per-day', unit: 'GPU-h' })),
        h('div', { class: 'card' }, h('h2', { text: 'Pool GPU utilisation' }), h('div', { id: 'pool-telemetry-slot' }, oldPlot))));
    // The telemetry's points: about 300 over the window, in whole minutes.
    const step = Math.max(60, Math.round((w.untilMs - w.sinceMs) / 1000 / 300 / 60) * 60);
    const plot = await telemetryPlot(`since_ms=${w.sinceMs}&step_s=${step}`, 'Pool GPU utilisation', 'pool-telemetry', { untilMs: w.untilMs });
    const slot = document.getElementById('pool-telemetry-slot');
    if (slot && gen === generation) slot.replaceChildren(plot);
  }

  // ---- live refresh ----
  // The page in view is drawn again every REFRESH_MS (usage, a heavier page, every
  // USAGE_REFRESH_MS) while the tab is visible; a hidden tab asks nothing, and a tab shown
  // again is refreshed at once. The header says when the view was last drawn.
  const REFRESH_MS = 5000;
  const USAGE_REFRESH_MS = 60000;
  const live = { timer: 0, updatedMs: 0, busy: false };
  function liveText() {
    const el = document.getElementById('live');
    if (!el || !session.user) return;
    const hidden = document.visibilityState === 'hidden';
    el.dataset.state = hidden ? 'paused' : 'live';
    el.dataset.updatedMs = String(live.updatedMs);
    const ago = live.updatedMs ? Math.max(0, Math.round((Date.now() - live.updatedMs) / 1000)) : null;
    el.textContent = hidden ? `paused (tab hidden)${ago !== null ? ` · updated ${ago}s ago` : ''}`
      : ago !== null ? `live · updated ${ago}s ago` : 'live';
  }
  function scheduleRefresh() {
    clearTimeout(live.timer);
    live.timer = 0;
    if (!session.user || document.visibilityState === 'hidden') return;
    const page = (location.hash || '').split('?')[0];
    live.timer = setTimeout(refresh, page === '#/usage' ? USAGE_REFRESH_MS : REFRESH_MS);
  }
  async function refresh() {
    // Not while the user is typing into a field of the view (a filter), and not on top of
    // a draw. (A select keeps the focus after a choice; its choice survives a redraw.)
    const focused = document.activeElement;
    if (live.busy || (focused && view().contains(focused) && focused.matches('input:not([type]), input[type="text"], input[type="date"]'))) {
      scheduleRefresh();
      return;
    }
    await draw(true);
  }
  document.addEventListener('visibilitychange', () => {
    liveText();
    if (document.visibilityState === 'hidden') { clearTimeout(live.timer); live.timer = 0; } else if (session.user) refresh();
  });
  setInterval(liveText, 1000);

  // ---- routing ----
  // Draws the view the address names: a new view (route) or the same one again (refresh,
  // which keeps the scroll position).
  async function draw(refreshing) {
    const gen = ++generation;
    live.busy = true;
    if (!refreshing) delete document.body.dataset.queueRendered;
    const scroll = [window.scrollX, window.scrollY];
    const hash = location.hash || '#/cluster';
    const [path, query] = hash.slice(1).split('?');
    const parts = path.split('/').filter(Boolean);
    for (const a of document.querySelectorAll('header nav a')) a.classList.toggle('active', a.id === `nav-${parts[0] || 'cluster'}`);
    try {
      if (parts[0] === 'queue') await queuePage(gen, parseQuery(query));
      else if (parts[0] === 'jobs' && /^\d+(_\d+)?$/.test(parts[1] || '')) await jobPage(gen, parts[1], refreshing);
      else if (parts[0] === 'usage') await usagePage(gen, parseQuery(query));
      else await clusterPage(gen);
      if (gen === generation) live.updatedMs = Date.now();
    } catch (e) {
      if (!(e instanceof Unauthorized) && gen === generation) show(h('p', { class: 'error', text: `error: ${e.message}` }));
    } finally {
      if (gen === generation) {
        live.busy = false;
        if (refreshing) window.scrollTo(scroll[0], scroll[1]);
        liveText();
        scheduleRefresh();
      }
    }
  }
  function route() { return draw(false); }

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
