// fenceq status page. Plain JavaScript, no dependencies, no build step.
// It polls the JSON API every 2 seconds and redraws what changed. With an
// auth file on the server, it asks for a bearer token once and keeps it in
// sessionStorage (this tab only).
'use strict';
(() => {
  const POLL_MS = 2000;
  const TOKEN_KEY = 'fenceq.token';
  const STATES = ['available', 'scheduled', 'claimed', 'completed', 'dead', 'cancelled'];
  const $ = (sel) => document.querySelector(sel);

  // el builds an element: el('td', {class: 'num', text: 3}, child…).
  function el(tag, attrs, ...children) {
    const e = document.createElementNS(tag === 'svg' || attrs?.svg ? 'http://www.w3.org/2000/svg' : 'http://www.w3.org/1999/xhtml', tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false || k === 'svg') continue;
      if (k === 'text') e.textContent = String(v);
      else if (k === 'class') e.setAttribute('class', v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c !== undefined && c !== null && c !== false) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }
  const svg = (tag, attrs, ...children) => el(tag, {...attrs, svg: true}, ...children);

  // ---- time -------------------------------------------------------------
  let clockSkew = 0; // server time minus this browser's time, in ms
  const serverNow = () => Date.now() + clockSkew;

  function fmtDuration(ms) {
    let s = Math.max(0, Math.round(ms / 1000));
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    const p = (n) => String(n).padStart(2, '0');
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${p(m)}m`;
    if (m) return `${m}m ${p(s)}s`;
    return `${s}s`;
  }
  const fmtTime = (iso) => new Date(iso).toLocaleString();
  function relative(iso) {
    const ms = Date.parse(iso) - serverNow();
    return ms >= 0 ? `in ${fmtDuration(ms)}` : `${fmtDuration(-ms)} ago`;
  }
  // A <time> that keeps its relative text current (see tickClocks).
  function timeEl(iso, mode) {
    if (!iso) return el('span', {class: 'muted', text: '—'});
    const t = el('time', {datetime: iso, title: fmtTime(iso), 'data-clock': mode || 'relative'});
    renderClock(t);
    return t;
  }
  function renderClock(t) {
    const iso = t.getAttribute('datetime');
    const ms = Date.parse(iso) - serverNow();
    switch (t.dataset.clock) {
      case 'left': // a lease: time left, or how long ago it ran out
        t.textContent = ms >= 0 ? fmtDuration(ms) : `expired ${fmtDuration(-ms)} ago`;
        // Running out is how a lease ends (a worker gone, a holder done):
        // shown plainly, not as an alarm.
        t.classList.toggle('expired', ms < 0);
        t.classList.toggle('soon', ms >= 0 && ms < 5000);
        break;
      default:
        t.textContent = ms >= 0 ? `in ${fmtDuration(ms)}` : `${fmtDuration(-ms)} ago`;
    }
  }
  function tickClocks() { document.querySelectorAll('time[data-clock]').forEach(renderClock); }

  // ---- API and the token ------------------------------------------------
  class APIError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }
  const token = {
    get: () => sessionStorage.getItem(TOKEN_KEY) || '',
    set: (t) => sessionStorage.setItem(TOKEN_KEY, t),
    clear: () => sessionStorage.removeItem(TOKEN_KEY),
  };
  let asking = null; // the pending token prompt, shared by concurrent calls

  function askToken(message) {
    if (asking) return asking;
    asking = new Promise((resolve) => {
      const dlg = $('#token-dialog'), form = $('#token-form'), input = $('#token-input');
      $('#token-message').textContent = message;
      input.value = '';
      const done = (t) => {
        form.removeEventListener('submit', onSubmit);
        $('#token-cancel').removeEventListener('click', onCancel);
        dlg.removeEventListener('cancel', onCancel);
        if (dlg.open) dlg.close();
        asking = null;
        resolve(t);
      };
      const onSubmit = (ev) => {
        ev.preventDefault();
        const t = input.value.trim();
        if (!t) return;
        token.set(t);
        done(t);
      };
      const onCancel = (ev) => { ev.preventDefault(); done(''); };
      form.addEventListener('submit', onSubmit);
      $('#token-cancel').addEventListener('click', onCancel);
      dlg.addEventListener('cancel', onCancel);
      dlg.showModal();
      input.focus();
    });
    return asking;
  }

  let signedOut = false;

  async function api(method, path, body) {
    for (;;) {
      if (signedOut) throw new APIError(401, 'unauthenticated', 'Signed out: sign in to see the queue.');
      const headers = {Accept: 'application/json'};
      const t = token.get();
      if (t) headers.Authorization = `Bearer ${t}`;
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      const resp = await fetch(path, {method, headers, cache: 'no-store',
        body: body === undefined ? undefined : JSON.stringify(body)});
      if (resp.status === 401) {
        token.clear();
        const next = await askToken(t ? 'That token was refused. Enter a valid bearer token.'
          : 'This server needs a bearer token to show its queues.');
        if (!next) { signedOut = true; showSignIn(); continue; }
        continue;
      }
      const text = await resp.text();
      let data = null;
      try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
      if (!resp.ok) {
        const e = (data && data.error) || {};
        throw new APIError(resp.status, e.code || `http_${resp.status}`, e.message || resp.statusText);
      }
      return data;
    }
  }

  function showSignIn() {
    const b = $('#signout');
    b.hidden = false;
    b.textContent = token.get() ? 'Sign out' : 'Sign in';
  }
  $('#signout').addEventListener('click', () => {
    if (token.get()) {
      token.clear();
      signedOut = true;
      showSignIn();
      setConn('error', 'Signed out');
      $('#whoami').textContent = '';
      return;
    }
    signedOut = false;
    askToken('Enter a bearer token.').then((t) => { if (!t) signedOut = true; showSignIn(); refresher.now(); });
  });

  // ---- connection state, notices ------------------------------------------
  function setConn(state, text) {
    const c = $('#conn');
    if (c.dataset.state !== state || c.textContent !== text) {
      c.dataset.state = state;
      c.className = `conn ${state}`;
      c.textContent = text;
    }
    if (state === 'live') $('#updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
  }
  let noticeTimer = null;
  function notify(text, bad) {
    const n = $('#notice');
    n.textContent = text;
    n.classList.toggle('bad', !!bad);
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { n.textContent = ''; }, 8000);
  }
  function showWho(w) {
    if (!w.auth) { $('#whoami').textContent = ''; return; }
    $('#whoami').textContent = `${w.principal} (${w.roles.join(', ')})`;
    showSignIn();
  }

  // ---- polling -----------------------------------------------------------
  // poller runs fn now and then every POLL_MS after the previous run
  // finished; it pauses while the tab is hidden.
  function poller(fn) {
    let timer = null, running = false, again = false;
    async function run() {
      clearTimeout(timer); timer = null;
      if (running) { again = true; return; }
      if (document.hidden) return;
      running = true;
      try {
        await fn();
        setConn('live', 'Live');
      } catch (e) {
        if (e instanceof APIError && e.status === 401) setConn('error', 'Signed out');
        else setConn('error', `Reconnecting… (${e.message})`);
      }
      running = false;
      if (again) { again = false; run(); return; }
      timer = setTimeout(run, POLL_MS);
    }
    document.addEventListener('visibilitychange', () => { if (!document.hidden && !timer && !running) run(); });
    return {now: run};
  }
  let refresher = {now() {}};

  // ---- table helpers ------------------------------------------------------
  const drawn = new Map(); // table id → JSON of what it shows, to redraw only on change
  function fillTable(id, items, row, emptyText) {
    const key = JSON.stringify(items);
    if (drawn.get(id) === key) return;
    drawn.set(id, key);
    const table = document.getElementById(id);
    const labels = [...table.querySelectorAll('thead th')].map((th) => th.textContent.trim());
    const tbody = table.tBodies[0];
    if (!items.length) {
      tbody.replaceChildren(el('tr', {}, el('td', {colspan: labels.length, class: 'empty', text: emptyText})));
      return;
    }
    tbody.replaceChildren(...items.map((item) => {
      const tr = row(item);
      [...tr.children].forEach((td, i) => { if (!td.hasAttribute('data-label')) td.setAttribute('data-label', labels[i] || ''); });
      return tr;
    }));
  }
  const td = (attrs, ...children) => el('td', attrs, ...children);
  const jobLink = (id) => el('a', {href: `/jobs/${id}`, text: `#${id}`, 'aria-label': `Job ${id}`});
  // jobCell is a job's link and kind, one flex item in a phone's card.
  const jobCell = (j) => td({}, el('span', {}, jobLink(j.id), j.kind ? el('span', {class: 'sub', text: j.kind}) : null));
  const show = (id, on) => { document.getElementById(id).hidden = !on; };
  function countText(id, shown, total) {
    document.getElementById(id).textContent = total > shown ? `(${shown} of ${total})` : `(${total})`;
  }

  function actionButton(action, id) {
    const label = action === 'retry' ? 'Retry' : 'Cancel';
    return el('button', {type: 'button', class: `btn small${action === 'cancel' ? ' danger' : ''}`,
      'data-action': action, 'data-id': id, 'aria-label': `${label} job ${id}`, text: label});
  }
  document.addEventListener('click', async (ev) => {
    const b = ev.target.closest('button[data-action]');
    if (!b) return;
    const {action, id} = b.dataset;
    b.disabled = true;
    try {
      const job = await api('POST', `/v1/jobs/${id}/${action}`);
      notify(`Job ${job.id} is ${job.state} now.`);
    } catch (e) {
      notify(`Could not ${action} job ${id}: ${e.message}`, true);
      b.disabled = false;
    }
    refresher.now();
  });

  // A paused queue takes enqueues but gives no claims; an admin pauses and
  // resumes it here (POST /v1/queues/{queue}/pause, /resume).
  function queueButton(q) {
    const action = q.paused ? 'resume' : 'pause';
    const label = q.paused ? 'Resume' : 'Pause';
    return el('button', {type: 'button', class: 'btn small', 'data-queue-action': action, 'data-for-queue': q.queue,
      'aria-label': `${label} queue ${q.queue}`, text: label});
  }
  document.addEventListener('click', async (ev) => {
    const b = ev.target.closest('button[data-queue-action]');
    if (!b) return;
    const action = b.dataset.queueAction, queue = b.dataset.forQueue;
    b.disabled = true;
    try {
      const r = await api('POST', `/v1/queues/${encodeURIComponent(queue)}/${action}`);
      const already = r.changed ? '' : (r.paused ? ' (it already was)' : ' (it was not paused)');
      notify(r.paused ? `Queue ${r.queue} is paused${already}: it takes jobs but gives none to workers.`
        : `Queue ${r.queue} runs again${already}.`);
    } catch (e) {
      notify(`Could not ${action} queue ${queue}: ${e.message}`, true);
      b.disabled = false;
    }
    refresher.now();
  });

  // ---- the status page ------------------------------------------------------
  // latencyCell: how long the queue's oldest available job has waited for
  // a claim (latency_ms, as of the poll), its job linked in the title.
  function latencyCell(q) {
    const ms = q.latency_ms || 0;
    return td({class: ms ? 'num' : 'num zero', 'data-queue': q.queue, 'data-state': 'latency',
      title: q.oldest_job ? `Job ${q.oldest_job}, available since ${fmtTime(q.oldest_available_at)}` : 'No job is waiting',
      text: ms ? fmtDuration(ms) : '—'});
  }

  function drawQueues(queues, can) {
    fillTable('queues', queues.map((q) => ({...q, canPause: !!can.pause})), (q) => {
      let total = 0;
      const cells = STATES.map((st) => {
        const n = q.counts[st] || 0;
        total += n;
        return td({class: n ? 'num' : 'num zero', 'data-queue': q.queue, 'data-state': st, text: n});
      });
      const name = el('th', {scope: 'row', 'data-label': 'Queue'}, q.queue,
        q.paused ? el('span', {class: 'badge paused', 'data-paused': q.queue,
          title: `Paused by ${q.paused_by || 'unknown'} at ${fmtTime(q.paused_at)}: no claims until resumed`, text: 'paused'}) : null);
      return el('tr', {'data-queue-row': q.queue, class: q.paused ? 'paused' : null}, name, cells,
        td({class: 'num', 'data-queue': q.queue, 'data-state': 'total', text: total}),
        latencyCell(q),
        td({class: 'act', 'data-label': ''}, q.canPause ? queueButton(q) : null));
    }, 'No jobs yet.');
    const tfoot = document.querySelector('#queues tfoot');
    if (queues.length > 1) {
      const sums = STATES.map((st) => queues.reduce((a, q) => a + (q.counts[st] || 0), 0));
      const key = sums.join(',');
      if (tfoot.dataset.key !== key) {
        tfoot.dataset.key = key;
        tfoot.replaceChildren(el('tr', {}, el('th', {scope: 'row', text: 'All queues'}),
          sums.map((n, i) => td({class: 'num', 'data-label': STATES[i], 'data-queue': '', 'data-state': STATES[i], text: n})),
          td({class: 'num', 'data-label': 'total', text: sums.reduce((a, b) => a + b, 0)}),
          td({class: 'num', 'data-label': 'Oldest waits', text: fmtDuration(Math.max(0, ...queues.map((q) => q.latency_ms || 0)))}),
          td({class: 'act', 'data-label': ''})));
      }
    } else {
      tfoot.replaceChildren();
      delete tfoot.dataset.key;
    }
  }

  let lastChart = null;
  function drawChart(buckets, bucketSeconds) {
    const chart = $('#chart');
    // The drawing is as wide as the element, so text is never stretched.
    const W = Math.max(240, Math.round(chart.getBoundingClientRect().width) || 640);
    const key = JSON.stringify([W, buckets.map((b) => [b.claims, b.completions, b.failures])]);
    lastChart = [buckets, bucketSeconds];
    if (drawn.get('chart') === key) return;
    drawn.set('chart', key);
    const H = 180, L = 34, R = 8, T = 10, B = 22;
    chart.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const series = ['claims', 'completions', 'failures'];
    // Whole counts get whole ticks: the top is even, so its half is whole.
    const peak = Math.max(1, ...buckets.flatMap((b) => series.map((s) => b[s])));
    const max = peak + (peak % 2);
    const x = (i) => L + (i * (W - L - R)) / Math.max(1, buckets.length - 1);
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const keep = [chart.querySelector('title'), chart.querySelector('desc')];
    const grid = svg('g', {class: 'grid'});
    for (const v of [0, max / 2, max]) {
      grid.append(svg('line', {x1: L, x2: W - R, y1: y(v), y2: y(v)}),
        svg('text', {x: L - 6, y: y(v) + 4, 'text-anchor': 'end', 'data-tick': v, text: v}));
    }
    const minutes = Math.round((buckets.length * bucketSeconds) / 60);
    grid.append(svg('text', {x: L, y: H - 6, text: `−${minutes} min`}),
      svg('text', {x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle', text: `−${Math.round(minutes / 2)} min`}),
      svg('text', {x: W - R, y: H - 6, 'text-anchor': 'end', text: 'now'}));
    const lines = series.map((s) => svg('polyline', {class: `s-${s}`,
      points: buckets.map((b, i) => `${x(i).toFixed(1)},${y(b[s]).toFixed(1)}`).join(' ')}));
    chart.replaceChildren(...keep, grid, ...lines);
    const sums = Object.fromEntries(series.map((s) => [s, buckets.reduce((a, b) => a + b[s], 0)]));
    const last = buckets[buckets.length - 1] || {claims: 0, completions: 0, failures: 0};
    $('#chart-desc').textContent = `In the last ${minutes} minutes: ${sums.claims} claims, ${sums.completions} completions, ` +
      `${sums.failures} failures. Highest per ${bucketSeconds} seconds: ${peak}.`;
    $('#chart-legend').replaceChildren(...series.map((s) => el('span', {class: `key k-${s}`},
      el('span', {text: `${s[0].toUpperCase()}${s.slice(1)}: ${sums[s]} (${last[s]} in the last ${bucketSeconds} s)`}))));
  }

  function drawStatus(st, can) {
    drawQueues(st.queues || [], can);
    drawChart(st.throughput || [], st.bucket_seconds || 10);

    const claimed = st.claimed || {jobs: [], total: 0};
    countText('n-claimed', claimed.jobs.length, claimed.total);
    fillTable('claimed', claimed.jobs, (j) => el('tr', {'data-job': j.id},
      jobCell(j),
      td({text: j.queue}),
      td({class: 'mono', text: j.claimed_by}),
      td({class: 'num', text: j.fencing_token}),
      td({}, timeEl(j.lease_expires_at, 'left'))), 'No job is claimed.');

    // The total counts every scheduled job, those waiting for a retry too.
    const scheduled = st.scheduled || {jobs: [], total: 0};
    const retryingShown = (st.retrying || {jobs: []}).jobs.length;
    countText('n-scheduled', scheduled.jobs.length, Math.max(scheduled.jobs.length, scheduled.total - retryingShown));
    fillTable('scheduled', scheduled.jobs, (j) => el('tr', {'data-job': j.id},
      jobCell(j),
      td({text: j.queue}),
      td({}, timeEl(j.run_at), el('span', {class: 'sub', text: fmtTime(j.run_at)})),
      td({class: 'num', text: `${j.attempts} / ${j.max_attempts}`})), 'No job is scheduled.');

    const retrying = st.retrying || {jobs: [], total: 0};
    document.getElementById('n-retrying').textContent = `(${retrying.jobs.length}${retrying.jobs.length >= 50 ? '+' : ''})`;
    fillTable('retrying', retrying.jobs, (j) => el('tr', {'data-job': j.id},
      jobCell(j),
      td({text: j.queue}),
      td({class: 'num', text: `${j.attempts} / ${j.max_attempts}`}),
      td({class: 'err', text: j.last_error || '—'}),
      td({}, timeEl(j.run_at), el('span', {class: 'sub', text: fmtTime(j.run_at)}))), 'No job is waiting for a retry.');

    const workers = st.workers || [];
    document.getElementById('n-workers').textContent = `(${workers.length})`;
    fillTable('workers', workers, (w) => el('tr', {'data-worker': `${w.principal}|${w.worker}`},
      td({class: 'mono', text: `${w.principal}|${w.worker}`}),
      td({class: 'num', text: w.claims}),
      td({}, timeEl(w.last_claim_at)),
      td({}, timeEl(w.last_heartbeat_at)),
      td({}, timeEl(w.first_seen))), 'No worker was heard from in the last 24 hours.');

    const dead = st.dead || {jobs: [], total: 0};
    countText('n-dead', dead.jobs.length, dead.total);
    fillTable('dead', dead.jobs.map((j) => ({...j, can: [can.retry, can.cancel]})), (j) => el('tr', {'data-job': j.id},
      jobCell(j),
      td({text: j.queue}),
      td({class: 'num', text: `${j.attempts} / ${j.max_attempts}`}),
      td({class: 'err', text: j.last_error || '—'}),
      td({}, timeEl(j.updated_at)),
      td({'data-label': ''}, el('div', {class: 'actions'},
        can.retry ? actionButton('retry', j.id) : null,
        can.cancel ? actionButton('cancel', j.id) : null))), 'No dead jobs.');

    const zombies = st.zombies || [];
    document.getElementById('n-zombies').textContent = `(${zombies.length})`;
    fillTable('zombies', zombies, (z) => el('tr', {},
      td({}, timeEl(z.at)),
      td({class: 'mono', text: `${z.principal}|${z.worker}`}),
      td({}, jobLink(z.job)),
      td({text: z.operation}),
      td({class: 'num', text: z.token_sent || 'none'}),
      td({class: 'num', text: z.token_current || '—'}),
      td({text: z.job_state ? `${z.job_state}${z.held_by ? ` by ${z.held_by}` : ''}` : 'deleted'})),
    'No stale calls were refused.');

    const leases = st.leases || [];
    document.getElementById('n-leases').textContent = `(${leases.length})`;
    fillTable('leases', leases, (l) => el('tr', {},
      td({class: 'mono', text: l.name}),
      td({class: 'mono', text: l.holder || '—'}),
      td({class: 'num', text: l.fencing_token}),
      td({}, !l.expires_at ? el('span', {class: 'muted', text: 'released'}) : timeEl(l.expires_at, 'left'))),
    'No named leases.');

    const schedules = st.schedules || [];
    document.getElementById('n-schedules').textContent = `(${schedules.length})`;
    fillTable('schedules', schedules, (s) => el('tr', {'data-schedule': s.name, class: s.paused ? 'paused' : null},
      td({class: 'mono', text: s.name}),
      td({class: 'mono', text: s.cron ? `${s.cron} (${s.timezone})` : `every ${fmtDuration(s.every_ms)}`}),
      td({}, s.paused ? el('span', {class: 'badge paused', title: `Paused by ${s.paused_by || 'unknown'} at ${fmtTime(s.paused_at)}: ticks are dropped until resumed`, text: 'paused'})
        : (s.next_fire_at ? timeEl(s.next_fire_at, 'left') : el('span', {class: 'muted', text: 'none'}))),
      td({}, s.last_job ? el('span', {}, jobLink(s.last_job.id), ` ${s.last_job.state || 'deleted'}`) : el('span', {class: 'muted', text: 'none yet'})),
      td({class: 'num', text: s.missed_ticks}),
      td({class: 'num', text: s.skipped_ticks})),
    'No schedules.');

    if (st.audit) drawAudit(st.audit);
  }

  function drawAudit(a) {
    const key = JSON.stringify(a);
    if (drawn.get('audit') === key) return;
    drawn.set('audit', key);
    const v = a.verified;
    let verdict;
    if (!v) verdict = el('span', {class: 'muted', text: 'Not checked yet.'});
    else if (v.ok) verdict = el('span', {}, el('span', {class: 'ok', text: '✓ Verifies'}),
      ` through record ${v.verified_seq}`,
      v.start_seq ? ` from the checkpoint at record ${v.start_seq} (older records were archived)` : '',
      v.catching_up || v.verified_seq < v.head_seq ? ', checking the newer records' : '',
      ' (checked ', timeEl(v.checked_at), '; each check walks only the records added since the last)');
    else verdict = el('span', {}, el('span', {class: 'bad', text: `✗ Broken at record ${v.first_broken}`}), `: ${v.reason} (checked `, timeEl(v.checked_at), ')');
    $('#audit').replaceChildren(
      el('dt', {text: 'Head'}), el('dd', {}, a.head_seq ? `record ${a.head_seq}` : 'empty log'),
      el('dt', {text: 'Head hash'}), el('dd', {class: 'mono', title: a.head_hash, text: a.head_hash ? `${a.head_hash.slice(0, 16)}…` : '—'}),
      el('dt', {text: 'Chain'}), el('dd', {id: 'audit-verdict'}, verdict));
  }

  async function statusPage() {
    refresher = poller(async () => {
      const st = await api('GET', '/v1/status');
      clockSkew = Date.parse(st.now) - Date.now();
      showWho(st);
      const can = st.can;
      show('sec-queues', can.jobs); show('sec-throughput', can.jobs); show('sec-claimed', can.jobs);
      show('sec-scheduled', can.jobs); show('sec-dead', can.jobs); show('sec-zombies', can.jobs);
      show('sec-retrying', can.jobs); show('sec-workers', can.jobs);
      show('sec-leases', can.leases); show('sec-audit', can.audit); show('sec-schedules', can.schedules);
      show('sec-none', !can.jobs && !can.leases && !can.audit && !can.schedules);
      drawStatus(st, can);
    });
    refresher.now();
  }

  // ---- the job page ---------------------------------------------------------
  const pretty = (v) => (v === undefined || v === null ? 'null' : JSON.stringify(v, null, 2));

  async function jobPage() {
    const id = document.body.dataset.job;
    const history = new Map(); // seq → record
    let olderCursor = null;    // the "before" for older records, once a page was loaded
    let archived = null;       // the checkpoint, when the last page says older records were archived
    let who = null;

    function drawJob(j) {
      $('#job-missing').hidden = !!j;
      const state = $('#job-state');
      state.textContent = j ? j.state : 'not found';
      state.className = `badge st-${j ? j.state : 'cancelled'}`;
      show('sec-payload', !!j); show('sec-result', !!j && (j.result !== undefined || j.attestation !== undefined));
      show('sec-errors', !!j && !!(j.errors && j.errors.length));
      const acts = [];
      if (j && who) {
        if (who.can.retry && (j.state === 'dead' || j.state === 'cancelled')) acts.push(actionButton('retry', j.id));
        if (who.can.cancel && !['completed', 'cancelled'].includes(j.state)) acts.push(actionButton('cancel', j.id));
      }
      const key = JSON.stringify([j, acts.map((b) => b.dataset.action)]);
      if (drawn.get('job') === key) return;
      drawn.set('job', key);
      $('#job-actions').replaceChildren(...acts);
      if (!j) { $('#job-fields').replaceChildren(); return; }
      const f = [
        ['Queue', j.queue], ['Kind', j.kind || '—'], ['State', j.state], ['Priority', j.priority],
        ['Attempts', `${j.attempts} of ${j.max_attempts}`],
        ['Fencing token', j.fencing_token || '— (not claimed)'],
        ['Claimed by', j.claimed_by || '—'],
        ['Lease', j.lease_expires_at ? timeEl(j.lease_expires_at, 'left') : '—'],
        ['Run at', timeEl(j.run_at)], ['Created', timeEl(j.created_at)], ['Updated', timeEl(j.updated_at)],
        ['Completed', j.completed_at ? timeEl(j.completed_at) : '—'],
        ['Idempotency key', j.idempotency_key || '—'], ['Last error', j.last_error || '—'],
      ];
      $('#job-fields').replaceChildren(...f.flatMap(([k, v]) => [el('dt', {text: k}), el('dd', {}, v)]));
      $('#job-payload').textContent = pretty(j.payload);
      $('#job-result').textContent = pretty(j.result);
      $('#job-attestation').textContent = pretty(j.attestation);
      fillTable('job-errors', [...(j.errors || [])].reverse(), (e) => el('tr', {},
        td({class: 'num', text: e.attempt}), td({}, timeEl(e.at)), td({class: 'err', text: e.error})), 'No errors.');
    }

    function drawHistory() {
      const recs = [...history.values()].sort((a, b) => b.seq - a.seq);
      document.getElementById('n-history').textContent = `(${recs.length}${olderCursor ? '+' : ''})`;
      fillTable('history', recs, (r) => el('tr', {'data-action': r.action},
        td({class: 'num', text: r.seq}),
        td({}, timeEl(r.time), el('span', {class: 'sub', text: fmtTime(r.time)})),
        td({text: r.action}),
        td({class: 'mono', text: r.principal}),
        td({class: 'num', text: r.token || '—'}),
        td({class: 'mono small'}, Object.entries(r.details || {}).map(([k, v]) => el('span', {class: 'sub', text: `${k}: ${v}`})))),
      'No audit records for this job.');
      $('#history-more').hidden = !olderCursor;
      const note = $('#history-archived');
      note.hidden = !archived;
      if (archived) {
        note.replaceChildren(`Audit records up to #${archived.seq} (the newest of them from `, timeEl(archived.time),
          ') were archived ', timeEl(archived.archived_at), ': older history is in the archive files, not here.');
      }
    }

    $('#history-more').addEventListener('click', async () => {
      if (!olderCursor) return;
      try {
        const page = await api('GET', `/v1/jobs/${id}/history?limit=100&before=${olderCursor}`);
        page.records.forEach((r) => history.set(r.seq, r));
        olderCursor = page.next || null;
        if (!olderCursor) archived = page.archived || null;
        drawHistory();
      } catch (e) { notify(`Could not load older records: ${e.message}`, true); }
    });

    refresher = poller(async () => {
      who = await api('GET', '/v1/whoami');
      clockSkew = Date.parse(who.now) - Date.now();
      showWho(who);
      let job = null;
      try { job = await api('GET', `/v1/jobs/${id}`); } catch (e) { if (!(e instanceof APIError && e.status === 404)) throw e; }
      const page = await api('GET', `/v1/jobs/${id}/history?limit=100`);
      const refused = await api('GET', `/v1/jobs/${id}/refusals?limit=100`);
      document.getElementById('n-refusals').textContent = `(${refused.refusals.length})`;
      fillTable('job-refusals', refused.refusals, (z) => el('tr', {'data-operation': z.operation},
        td({}, timeEl(z.at), el('span', {class: 'sub', text: fmtTime(z.at)})),
        td({class: 'mono', text: `${z.principal}|${z.worker}`}),
        td({text: z.operation}),
        td({class: 'num', text: z.token_sent || 'none'}),
        td({class: 'err', text: z.message})), 'No stale call against this job was refused.');
      page.records.forEach((r) => history.set(r.seq, r));
      if (olderCursor === null && page.next) olderCursor = page.next;
      if (!page.next) archived = page.archived || null;
      drawJob(job);
      drawHistory();
    });
    refresher.now();
  }

  setInterval(tickClocks, 1000);
  window.addEventListener('resize', () => { if (lastChart) drawChart(...lastChart); });
  if (document.body.dataset.page === 'job') jobPage(); else statusPage();
})();
