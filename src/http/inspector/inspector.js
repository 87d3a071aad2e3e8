// The session inspector's pages. Everything shown comes from /ui/api as JSON and is
// put on the page with textContent: no HTML is ever built from data.
'use strict';

let csrf = null;

async function api(path, options = {}) {
  const response = await fetch(path, { credentials: 'same-origin', ...options });
  if (response.status === 401) {
    location.assign('/ui/login');
    throw new Error('signed out');
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new Error(body.error ? body.error.message : response.statusText);
  }
  return body;
}

function post(path, body) {
  return api(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-csrf-token': csrf },
    body: JSON.stringify(body),
  });
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function $(id) {
  return document.getElementById(id);
}

function notice(error) {
  const box = $('notice');
  if (!box) return;
  box.textContent = error ? String(error.message || error) : '';
  box.hidden = !error;
}

function when(value) {
  if (value === null || value === undefined || value === '') return '';
  const date = new Date(typeof value === 'number' ? value : String(value));
  return isNaN(date) ? String(value) : date.toLocaleString();
}

function sessionLink(key) {
  const link = el('a', null, key);
  link.href = '/ui/session?key=' + encodeURIComponent(key);
  return link;
}

async function signIn() {
  const me = await api('/ui/api/me');
  csrf = me.csrf;
  const signOut = $('sign-out');
  if (signOut) {
    signOut.addEventListener('click', async () => {
      await post('/ui/logout', {}).catch(() => {});
      location.assign('/ui/login');
    });
  }
  return me;
}

// ---- the login page ----

function loginPage() {
  if (new URLSearchParams(location.search).has('failed')) $('failed').hidden = false;
}

// ---- the sessions page ----

async function sessionsPage() {
  const me = await signIn();
  const params = new URLSearchParams(location.search);
  const form = $('filters');
  $('agent').value = params.get('agent') || me.agent;
  $('channel').value = params.get('channel') || '';
  $('status').value = params.get('status') || '';
  $('q').value = params.get('q') || '';
  $('search-box').hidden = !me.search;
  let cursor = null;

  async function load(more) {
    notice(null);
    const query = new URLSearchParams(new FormData(form));
    for (const [name, value] of [...query]) if (!value) query.delete(name);
    if (!more) {
      history.replaceState(null, '', '/ui/sessions?' + query);
      $('sessions').replaceChildren();
    } else if (cursor) {
      query.set('cursor', cursor);
    }
    try {
      const page = await api('/ui/api/sessions?' + query);
      for (const session of page.sessions) $('sessions').append(sessionRow(session));
      cursor = page.nextCursor;
      $('more').hidden = !cursor;
      $('empty').hidden = $('sessions').children.length > 0;
    } catch (error) {
      notice(error);
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    load(false);
  });
  $('more').addEventListener('click', () => load(true));
  await load(false);
}

function sessionRow(session) {
  const row = el('tr');
  row.dataset.key = session.key;
  const key = el('td', 'key');
  key.append(sessionLink(session.key));
  if (session.label) key.append(el('div', 'muted', session.label));
  row.append(
    key,
    el('td', null, session.channel || ''),
    el('td', null, session.person || ''),
    el('td', 'status status-' + session.status, session.status),
    el('td', null, when(session.updatedAt)),
    el('td', 'number', session.turns ?? ''),
    el('td', 'number', session.tokens ?? ''),
  );
  return row;
}

// ---- one session ----

function textOf(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((block) => {
      if (block.type === 'text') return block.text;
      if (block.type === 'toolCall') return '→ ' + block.name + '(' + JSON.stringify(block.arguments ?? {}) + ')';
      if (block.type === 'thinking') return '';
      return '[' + block.type + ']';
    })
    .filter(Boolean)
    .join('\n');
}

// What one transcript line says: who, what, when.
function describe(data) {
  const entry = data.entry || {};
  if (data.truncated) {
    return { who: entry.type || 'line', text: '(a line of ' + data.bytes + ' bytes, not shown)' };
  }
  const at = entry.timestamp;
  if (entry.message) {
    const message = entry.message;
    let who = message.role;
    if (who === 'toolResult') who = 'tool ' + (message.toolName || '');
    return { who, id: entry.id, text: textOf(message.content), at, usage: who === 'assistant' ? message.usage : null };
  }
  const custom = entry.customType || '';
  const payload = entry.data || {};
  if (entry.type === 'compaction') return { who: 'compaction', text: entry.summary || 'the conversation before was summarised', at };
  if (custom === 'agent-sessions.status') return { who: 'status', text: payload.status || '', at };
  if (custom === 'agent-sessions.checkpoint') return { who: 'checkpoint', text: payload.reason || '', at };
  if (custom === 'agent-sessions.delivery') {
    // A mark on the reply it reports on: which part, and what became of it.
    const part = Number(payload.part) > 0 ? 'part ' + (Number(payload.part) + 1) + ' ' : '';
    const what = { delivered: 'delivered', failed: 'not delivered', partly: 'partly delivered' }[payload.status] || String(payload.status);
    const text = part + what + (payload.reason ? ': ' + payload.reason : '');
    return { who: 'delivery', about: payload.line, slot: 'delivery-' + (payload.part ?? 0), mark: payload.status, text, at };
  }
  if (custom === 'agent-sessions.undo') {
    return { who: 'undo', about: payload.lines || [], slot: 'undo', mark: 'failed', text: 'undone: no longer seen by the model', at };
  }
  if (custom === 'agent-sessions.edit') {
    return { who: 'edit', about: payload.line, slot: 'edit', mark: 'partly', text: 'edited: ' + String(payload.text ?? ''), at };
  }
  if (custom === 'agent-sessions.turn-failed') {
    const text = 'model call failed; input ' + (payload.input === 'dropped' ? 'dropped' : 'kept for the next turn');
    return { who: 'failed', about: payload.inbound, slot: 'failed', mark: 'failed', text, at };
  }
  if (entry.type === 'session') return { who: 'session', text: 'transcript started', at };
  return { who: custom || entry.type || 'line', text: entry.data ? JSON.stringify(entry.data) : '', at };
}

function item(said) {
  const li = el('li', 'item who-' + said.who.split(' ')[0]);
  if (said.id) li.dataset.line = said.id;
  const head = el('div', 'head');
  head.append(el('span', 'who', said.who), el('span', 'marks'), el('time', 'muted', when(said.at)));
  li.append(head, el('div', 'text', said.text));
  return li;
}

// Adds what `said` says to `list`: a mark about another line (a delivery report, a
// failed model call) goes on that line when the list shows it — a later report of the
// same part replaces the earlier — else it is a line of its own.
function place(list, said) {
  const about = [].concat(said.about ?? []);
  const lines = [...list.querySelectorAll('li[data-line]')];
  const targets = lines.filter((li) => about.includes(li.dataset.line));
  if (!targets.length) {
    list.append(item(said));
    return;
  }
  for (const target of targets) {
    const marks = target.querySelector('.marks');
    const mark = el('span', 'mark ' + said.mark, said.text);
    mark.dataset.slot = said.slot;
    const earlier = [...marks.children].find((m) => m.dataset.slot === said.slot);
    if (earlier) earlier.replaceWith(mark);
    else marks.append(mark);
  }
}

function divider(text) {
  return el('li', 'divider', text);
}

function renderUsage(list, said) {
  if (!said.usage) return;
  const total = said.usage.totalTokens ?? (said.usage.input ?? 0) + (said.usage.output ?? 0);
  const li = el('li');
  li.dataset.total = total;
  const bar = el('span', 'bar');
  li.append(el('time', 'muted', when(said.at)), bar, el('span', 'number', total + ' tokens'));
  list.append(li);
  $('usage-none').hidden = true;
  const largest = Math.max(...[...list.children].map((row) => Number(row.dataset.total) || 0), 1);
  for (const row of list.children) {
    row.querySelector('.bar').style.width = Math.round((100 * (Number(row.dataset.total) || 0)) / largest) + '%';
  }
}

function renderFields(entry) {
  const fields = $('fields');
  fields.replaceChildren();
  if (!entry) {
    fields.append(el('dd', 'muted', 'No current session: its next message starts one.'));
    return;
  }
  for (const [name, value] of Object.entries(entry)) {
    if (value === null || value === undefined) continue;
    const shown = typeof value === 'object' ? JSON.stringify(value) : String(value);
    fields.append(el('dt', null, name), el('dd', null, shown));
  }
}

// The session's run (since when, by whom) and the messages that wait for it.
function laneText(entry) {
  if (!entry) return '';
  const parts = [];
  if (entry.run) {
    parts.push('a model run holds it since ' + when(entry.run.startedAt) + ' (' + entry.run.holder + ')');
  }
  const queued = entry.queued || [];
  if (queued.length) {
    const texts = queued.map((q) => String((q.message && q.message.body) || '').slice(0, 80));
    parts.push(queued.length + (queued.length === 1 ? ' message waits: ' : ' messages wait: ') + texts.join(' · '));
  }
  if (entry.queueDropped && entry.queueDropped.count) {
    parts.push(entry.queueDropped.count + ' dropped by the queue cap');
  }
  if (entry.queueMode) parts.push('queue mode: ' + entry.queueMode);
  return parts.length ? parts.join(' · ') : 'no run; nothing queued';
}

async function sessionPage() {
  await signIn();
  const key = new URLSearchParams(location.search).get('key') || '';
  $('key').textContent = key;
  document.title = key + ' · agent-sessions';

  // The last turn's tokens, each figure named: the prompt (input, with what came from
  // the provider's cache) and the reply. Not a sum: the prompt holds the input.
  function lastTurnText(entry) {
    const total = entry.totalTokens;
    const input = entry.inputTokens;
    let text = 'Last turn: prompt of ' + total + ' tokens';
    if (input != null && input < total) {
      text += ' (' + input + ' input + ' + (total - input) + ' from the cache)';
    }
    if (entry.outputTokens != null) {
      text += ', reply of ' + entry.outputTokens + ' tokens';
    }
    return text;
  }

  async function refresh() {
    try {
      const found = await api('/ui/api/session?key=' + encodeURIComponent(key));
      const entry = found.session;
      renderFields(entry);
      $('usage-total').textContent = entry && entry.totalTokens
        ? lastTurnText(entry)
        : '';
      $('summary').textContent = entry
        ? 'session ' + entry.sessionId + ' · ' + (entry.status || 'idle') +
          (entry.startReason ? ' · started: ' + entry.startReason : '')
        : 'no current session';
      $('lane').textContent = laneText(entry);
      const list = $('predecessors');
      list.replaceChildren();
      for (const earlier of found.predecessors) {
        const li = el('li');
        const open = el('button', 'link', when(earlier.updatedAt) + ' · ' + earlier.sessionId);
        open.type = 'button';
        open.addEventListener('click', () => showEarlier(earlier));
        li.append(open, el('div', 'muted', (earlier.startReason ? 'started: ' + earlier.startReason + ' · ' : '') + (earlier.turns ?? 0) + ' turns'));
        list.append(li);
      }
      if (!found.predecessors.length) list.append(el('li', 'muted', 'none'));
    } catch (error) {
      notice(error);
    }
  }

  async function showEarlier(earlier) {
    const list = $('earlier');
    list.replaceChildren();
    $('earlier-title').textContent = 'Earlier session ' + earlier.sessionId;
    $('earlier-title').hidden = false;
    list.hidden = false;
    const base = '/ui/api/conversation?key=' + encodeURIComponent(key) + '&session=' + encodeURIComponent(earlier.sessionId);
    // One page at a time, newest first; a button above it fetches the page before.
    async function page(before) {
      const read = await api(base + (before === undefined ? '' : '&before=' + before));
      const shown = el('ul');
      for (const data of read.events) place(shown, describe(data));
      const lines = [...shown.children];
      if (read.before !== undefined) {
        const more = el('button', 'link', 'show earlier lines');
        more.type = 'button';
        const holder = el('li', 'divider');
        holder.append(more);
        more.addEventListener('click', async () => {
          try {
            holder.replaceWith(...(await page(read.before)));
          } catch (error) {
            notice(error);
          }
        });
        lines.unshift(holder);
      }
      return lines;
    }
    try {
      list.append(...(await page()));
      $('earlier-title').scrollIntoView();
    } catch (error) {
      notice(error);
    }
  }

  function tab(show) {
    $('conversation').hidden = show !== 'written';
    $('context').hidden = show !== 'context';
    $('show-written').classList.toggle('selected', show === 'written');
    $('show-context').classList.toggle('selected', show === 'context');
  }
  $('show-written').addEventListener('click', () => tab('written'));
  $('show-context').addEventListener('click', async () => {
    tab('context');
    const list = $('context');
    list.replaceChildren();
    try {
      const context = await api('/ui/api/context?key=' + encodeURIComponent(key));
      for (const message of context.messages) list.append(item({ who: message.role, text: textOf(message.content) }));
      if (!context.messages.length) list.append(divider('The model would be given no earlier messages.'));
    } catch (error) {
      notice(error);
    }
  });

  for (const [button, path, question] of [
    ['reset', '/ui/api/reset', 'Reset this session? Its next message starts a new one; the current one is kept as an earlier session.'],
    ['close', '/ui/api/close', 'Close this session? Its next message starts a new one.'],
  ]) {
    $(button).addEventListener('click', async () => {
      if (!window.confirm(question)) return;
      try {
        await post(path, { key });
        await refresh();
      } catch (error) {
        notice(error);
      }
    });
  }

  await refresh();
  // The entry changes without a transcript line too (a run taken, a message queued).
  setInterval(() => {
    if (!document.hidden) refresh();
  }, 2000);
  const conversation = $('conversation');
  const stream = new EventSource('/ui/api/keys/' + encodeURIComponent(key) + '/events');
  stream.addEventListener('open', () => {
    $('live').textContent = 'live';
    $('live').classList.add('on');
  });
  stream.addEventListener('message', (event) => {
    const said = describe(JSON.parse(event.data));
    place(conversation, said);
    renderUsage($('usage'), said);
  });
  stream.addEventListener('session', (event) => {
    const session = JSON.parse(event.data);
    conversation.append(divider('session ' + session.sessionId + (session.startReason ? ' · started: ' + session.startReason : '')));
    refresh();
  });
  stream.addEventListener('error', (event) => {
    $('live').textContent = 'reconnecting';
    $('live').classList.remove('on');
    if (event.data) notice(JSON.parse(event.data).message);
  });
}

// The charts page: one bar chart per figure, drawn as SVG from /ui/api/activity.
const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

// A bar chart of `series` (each a list of numbers, one per day, drawn side by side)
// over `days`, its values labelled with `format`.
function barChart(section, days, series, format) {
  for (const old of section.querySelectorAll('svg, table')) old.remove();
  const width = 640, height = 180, left = 48, bottom = 22, top = 10;
  const max = Math.max(1, ...series.flat().filter((v) => v !== null));
  const chart = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', class: 'bars' });
  const slot = (width - left) / Math.max(1, days.length);
  const bar = Math.max(2, (slot * 0.8) / series.length);
  chart.append(svg('line', { x1: left, y1: height - bottom, x2: width, y2: height - bottom, class: 'axis' }));
  const topLabel = svg('text', { x: left - 6, y: top + 8, 'text-anchor': 'end', class: 'tick' });
  topLabel.textContent = format(max);
  chart.append(topLabel);
  days.forEach((day, n) => {
    series.forEach((values, s) => {
      const value = values[n];
      if (value === null || value === undefined) return;
      const h = ((height - bottom - top) * value) / max;
      const rect = svg('rect', {
        x: left + n * slot + slot * 0.1 + s * bar, y: height - bottom - h,
        width: bar, height: Math.max(h, value > 0 ? 1 : 0), class: 'series-' + s,
        'data-day': day, 'data-value': value,
      });
      const tip = svg('title', {});
      tip.textContent = `${day}: ${format(value)}`;
      rect.append(tip);
      chart.append(rect);
    });
    if (days.length <= 14 || n % Math.ceil(days.length / 14) === 0) {
      const label = svg('text', { x: left + n * slot + slot / 2, y: height - 6, 'text-anchor': 'middle', class: 'tick' });
      label.textContent = day.slice(5);
      chart.append(label);
    }
  });
  section.append(chart);
}

async function activityPage() {
  const me = await signIn();
  const params = new URLSearchParams(location.search);
  const form = $('filters');
  $('agent').value = params.get('agent') || me.agent;
  $('days').value = params.get('days') || '14';
  const count = (n) => Number(n).toLocaleString();
  const seconds = (ms) => (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + ' s';

  async function load() {
    notice(null);
    const query = new URLSearchParams(new FormData(form));
    history.replaceState(null, '', '/ui/activity?' + query);
    try {
      const figures = await api('/ui/api/activity?' + query);
      const days = figures.days.map((d) => d.day);
      const of = (name) => figures.days.map((d) => d[name]);
      barChart($('chart-turns'), days, [of('turns')], count);
      barChart($('chart-tokens'), days, [of('tokensIn'), of('tokensOut')], count);
      barChart($('chart-failed'), days, [of('failedTurns')], count);
      barChart($('chart-refused'), days, [of('refusedDeliveries')], count);
      barChart($('chart-latency'), days, [of('latencyMedianMs'), of('latencyP90Ms')], seconds);
      $('scope').textContent = `${figures.agent}: ${count(figures.sessions)} sessions active in these days` +
        (figures.truncated ? ' (the most recently active only)' : '') +
        (figures.unreadable ? `; ${count(figures.unreadable)} could not be read (see the service's log)` : '');
    } catch (error) {
      notice(error);
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    load();
  });
  await load();
}

document.addEventListener('DOMContentLoaded', () => {
  const page = document.body.dataset.page;
  const run = { login: loginPage, sessions: sessionsPage, session: sessionPage, activity: activityPage }[page];
  if (run) Promise.resolve(run()).catch(notice);
});
