// queen-node dashboard (docs/operations.md, "Dashboard"): plain JS and
// plain SVG, no build step. One refresh round every 2 s, scheduled with
// setTimeout after the previous round completes, so requests never pile up.
'use strict';
(function () {
  var TOKEN_KEY = 'queen-token';
  var PAGE = 50;               // queues per page (the API caps limits too)
  var WINDOW_MS = 15 * 60e3;   // chart history kept in this tab's memory
  var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];
  var $ = function (id) { return document.getElementById(id); };
  var offset = 0, total = 0;
  var prev = {};     // node name -> {t, push, pop, ack}: last counters, for rates
  var hist = {};     // node name -> [{t, push, pop, ack}] rates over WINDOW_MS
  var maint = {push: null, pop: null};
  var authNeeded = false;
  var timer = null;

  function token() { try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; } }

  // api fetches a JSON endpoint; base is '' (this node) or 'http://host:port'.
  // 401 shows the login box; any other failure throws an Error carrying the
  // server's {"error": ...} text and status.
  function api(path, opts, base) {
    opts = opts || {};
    var headers = {};
    if (token()) headers.Authorization = 'Bearer ' + token();
    if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
    return fetch((base || '') + path, {
      method: opts.method || 'GET', headers: headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body)
    }).then(function (r) {
      return r.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
        if (r.status === 401) { showLogin(); }
        if (!r.ok) {
          var err = new Error((data && data.error) || (r.status + ' ' + r.statusText));
          err.status = r.status;
          throw err;
        }
        return data;
      });
    });
  }

  function showLogin() { authNeeded = true; $('login').hidden = false; }
  function showError(msg) { var e = $('error'); e.textContent = msg; e.hidden = false; }
  function clearError() { var e = $('error'); e.textContent = ''; e.hidden = true; }

  function el(tag, attrs, children) {
    var n = document.createElement(tag);
    for (var k in attrs || {}) {
      if (k === 'text') n.textContent = attrs[k];
      else if (k === 'class') n.className = attrs[k];
      else n.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) { n.appendChild(typeof c === 'string' ? document.createTextNode(c) : c); });
    return n;
  }
  function td(v, cls) { return el('td', {text: v === undefined || v === null ? '' : String(v), 'class': cls || ''}); }
  function num(v) { return typeof v === 'number' && isFinite(v) ? v : 0; }
  function fmt(v) { v = num(v); return v >= 100 || v === Math.floor(v) ? String(Math.round(v)) : v.toFixed(1); }
  function dur(s) {
    s = Math.floor(num(s));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + (s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h' + Math.floor(s % 3600 / 60) + 'm';
    return Math.floor(s / 86400) + 'd' + Math.floor(s % 86400 / 3600) + 'h';
  }
  function get(o, path) {
    return path.split('.').reduce(function (a, k) { return a && a[k] !== undefined ? a[k] : undefined; }, o);
  }

  // ---- cluster ----------------------------------------------------------

  function memberRow(m, st) {
    var tr = el('tr', {'data-node': m.name, 'data-state': m.state || 'alive'});
    tr.appendChild(td(m.name + (m.self ? ' (this node)' : '')));
    tr.appendChild(td(m.state, 'state'));
    tr.appendChild(td(m.version || get(st, 'node.version')));
    if (!st) { for (var i = 0; i < 11; i++) tr.appendChild(td('')); return tr; }
    var h = hist[m.name], last = h && h.length ? h[h.length - 1] : null;
    tr.appendChild(td(dur(get(st, 'node.uptime_s'))));
    tr.appendChild(td(last ? fmt(last.push) : ''));
    tr.appendChild(td(last ? fmt(last.pop) : ''));
    tr.appendChild(td(last ? fmt(last.ack) : ''));
    tr.appendChild(td(num(get(st, 'requests.parked_long_polls'))));
    tr.appendChild(td(num(get(st, 'pg.acquired_conns')) + '/' + num(get(st, 'pg.max_conns'))));
    tr.appendChild(td(num(get(st, 'mesh.frames_sent')) + ' fr / ' + num(get(st, 'mesh.hints_sent'))));
    tr.appendChild(td(num(get(st, 'mesh.frames_received')) + ' fr / ' + num(get(st, 'mesh.hints_received'))));
    tr.appendChild(td(num(get(st, 'mesh.frames_dropped')) + num(get(st, 'mesh.frames_queue_dropped')) + num(get(st, 'mesh.coalescer.dropped'))));
    tr.appendChild(td(num(get(st, 'mesh.gaps_seen'))));
    tr.appendChild(td(num(get(st, 'hotlist.reseeds'))));
    return tr;
  }

  function record(name, st) {
    var now = Date.now();
    var c = {t: now, push: num(get(st, 'requests.pushed_messages')), pop: num(get(st, 'requests.popped_messages')), ack: num(get(st, 'requests.acks'))};
    var p = prev[name];
    prev[name] = c;
    if (!p || c.t <= p.t || c.push < p.push) return; // first sample, or the node restarted
    var dt = (c.t - p.t) / 1000;
    var h = hist[name] || (hist[name] = []);
    h.push({t: now, push: (c.push - p.push) / dt, pop: (c.pop - p.pop) / dt, ack: (c.ack - p.ack) / dt});
    while (h.length && h[0].t < now - WINDOW_MS) h.shift();
  }

  // chart draws one metric of every node as SVG polylines over WINDOW_MS.
  function chart(title, key) {
    var W = 360, H = 110, now = Date.now(), max = 1;
    var names = Object.keys(hist).sort();
    names.forEach(function (n) { hist[n].forEach(function (s) { if (s[key] > max) max = s[key]; }); });
    var ns = 'http://www.w3.org/2000/svg';
    var svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('width', W); svg.setAttribute('height', H);
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    var axis = document.createElementNS(ns, 'path');
    axis.setAttribute('d', 'M0 ' + (H - 1) + ' H' + W);
    axis.setAttribute('stroke', '#ccc');
    svg.appendChild(axis);
    var legend = el('div', {'class': 'legend'});
    names.forEach(function (n, i) {
      var pts = hist[n].map(function (s) {
        var x = W - (now - s.t) / WINDOW_MS * W, y = H - 2 - s[key] / max * (H - 6);
        return x.toFixed(1) + ',' + y.toFixed(1);
      }).join(' ');
      var line = document.createElementNS(ns, 'polyline');
      line.setAttribute('points', pts);
      line.setAttribute('fill', 'none');
      line.setAttribute('stroke', COLORS[i % COLORS.length]);
      line.setAttribute('stroke-width', '1.5');
      svg.appendChild(line);
      var sw = el('span', {text: '\u25A0 ' + n});
      sw.style.color = COLORS[i % COLORS.length];
      legend.appendChild(sw);
    });
    return el('div', {'class': 'chart'}, [el('div', {'class': 't', text: title + ' (last 15 min, max ' + fmt(max) + '/s)'}), svg, legend]);
  }

  // /status needs admin: a token below it is told once, in the table, and
  // /status is not asked again until the token changes (no 403 every 2 s).
  var statusForbiddenFor = null;
  function refreshCluster() {
    if (statusForbiddenFor !== null && statusForbiddenFor === token()) return Promise.resolve();
    return api('/status').catch(function (e) {
      if (e.status !== 403) throw e;
      statusForbiddenFor = token();
      $('members').replaceChildren(el('tr', null, [el('td', {colspan: '14', text: 'The cluster view reads /status, which needs an admin token: ' + e.message})]));
      $('charts').replaceChildren();
      return null;
    }).then(function (self) {
      if (!self) return;
      $('node-name').textContent = get(self, 'node.name') || '';
      var members = get(self, 'mesh.members') || [];
      if (!members.length) members = [{name: get(self, 'node.name') || 'this node', state: 'alive', self: true, version: get(self, 'node.version')}];
      members = members.slice().sort(function (a, b) { return a.name < b.name ? -1 : a.name > b.name ? 1 : 0; });
      // Every alive member's own /status, straight from its http_addr
      // (CORS is open); a dead or left member is not asked.
      return Promise.all(members.map(function (m) {
        if (m.self) return Promise.resolve(self);
        if (m.state !== 'alive' || !m.http_addr) return Promise.resolve(null);
        return api('/status', null, location.protocol + '//' + m.http_addr).catch(function () { return null; });
      })).then(function (stats) {
        var body = $('members');
        var rows = document.createDocumentFragment();
        members.forEach(function (m, i) {
          if (stats[i]) record(m.name, stats[i]);
          rows.appendChild(memberRow(m, stats[i]));
        });
        body.replaceChildren(rows);
        $('charts').replaceChildren(chart('push msg/s', 'push'), chart('pop msg/s', 'pop'), chart('ack/s', 'ack'));
      });
    });
  }

  // ---- queues -----------------------------------------------------------

  // groupsText shows the first groups of a queue with their lag, and the
  // time lag of the lagging ones: "g1: 12 (3s), g2: 0, +4 more".
  var LIST_GROUPS = 3;
  function groupsText(x) {
    var gs = x.consumerGroups || [];
    var parts = gs.slice(0, LIST_GROUPS).map(function (g) {
      return g.name + ': ' + num(g.lag) + (num(g.lag) > 0 ? ' (' + dur(g.timeLagSeconds) + ')' : '');
    });
    var more = Math.max(num(x.consumerGroupCount), gs.length) - parts.length;
    if (more > 0) parts.push('+' + more + ' more');
    return parts.join(', ');
  }

  // The search is the server's (name or namespace substring, over every
  // queue); the list is one page of its matches.
  function refreshQueues() {
    var search = ($('queue-search').value || '').trim();
    return api('/api/v1/resources/queues?limit=' + PAGE + '&offset=' + offset +
      (search ? '&search=' + encodeURIComponent(search) : '')).then(function (d) {
      total = num(d && d.total);
      var rows = document.createDocumentFragment();
      ((d && d.queues) || []).forEach(function (x) {
        var m = x.messages || {}, tp = x.throughput;
        var tr = el('tr', {'data-queue': x.name, 'data-pending': String(Math.round(num(m.pending))),
          'data-oldest-age': x.oldestPendingAt ? String(Math.floor(num(x.oldestPendingAgeSeconds))) : '',
          'data-groups': (x.consumerGroups || []).map(function (g) { return g.name + ':' + num(g.lag); }).join(',')});
        tr.appendChild(el('td', null, [el('a', {'class': 'queue-link', href: '#/queue/' + encodeURIComponent(x.name), text: x.name})]));
        tr.appendChild(td(x.namespace));
        tr.appendChild(td(num(x.partitions)));
        tr.appendChild(td(num(m.pending)));
        tr.appendChild(td(x.oldestPendingAt ? dur(x.oldestPendingAgeSeconds) : '', 'oldest'));
        tr.appendChild(td(num(m.processing)));
        tr.appendChild(td(num(m.completed)));
        tr.appendChild(td(num(m.deadLetter)));
        var gt = groupsText(x);
        var gcell = td(gt, 'groups');
        gcell.title = gt;
        tr.appendChild(gcell);
        // No throughput before the sampler's second round (docs/operations.md, "Dashboard").
        tr.appendChild(td(tp ? fmt(tp.pushedPerSecond) : '\u2013', 'rate'));
        tr.appendChild(td(tp ? fmt(tp.consumedPerSecond) : '\u2013', 'rate'));
        rows.appendChild(tr);
      });
      $('queues').replaceChildren(rows);
      var pages = Math.max(1, Math.ceil(total / PAGE));
      $('page-info').textContent = 'page ' + (Math.floor(offset / PAGE) + 1) + ' of ' + pages + ' (' + total +
        (search ? ' matching' : '') + ' queues)';
      $('prev').disabled = offset === 0;
      $('next').disabled = offset + PAGE >= total;
    });
  }

  // ---- queue page -------------------------------------------------------

  function currentQueue() {
    var m = /^#\/queue\/(.+)$/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  }

  function refreshQueue(name) {
    var qp = encodeURIComponent(name);
    return api('/api/v1/resources/queues/' + qp).then(function (q) {
      $('queue-title').textContent = name;
      var m = q.messages || {};
      $('queue-summary').textContent = 'namespace ' + (q.namespace || '-') + ', task ' + (q.task || '-') + ', ' +
        num(q.partitionCount) + ' partitions' + (q.partitionsTruncated ? ' (list truncated)' : '') +
        ', pending ' + num(m.pending) + ', processing ' + num(m.processing) + ', completed ' + num(m.completed) + ', DLQ ' + num(m.deadLetter);
      $('queue-config').textContent = JSON.stringify(q.config || {}, null, 2);

      var parts = (q.partitions || []).slice().sort(function (a, b) {
        return num(get(b, 'messages.pending')) - num(get(a, 'messages.pending')) || num(b.lastOffset) - num(a.lastOffset);
      });
      var prow = document.createDocumentFragment();
      parts.forEach(function (p) {
        var pm = p.messages || {};
        var tr = el('tr', {'data-partition': p.name});
        [p.name, num(p.lastOffset), num(pm.pending), num(pm.processing), num(pm.completed), num(pm.deadLetter), p.lastWriteAt || ''].forEach(function (v) { tr.appendChild(td(v)); });
        prow.appendChild(tr);
      });
      $('partitions').replaceChildren(prow);

      var groups = (q.consumerGroups || []).slice(0, 50);
      // Cursors per group (one small read each, bounded to 50 groups).
      return Promise.all(groups.map(function (g) {
        return api('/api/v1/consumer-groups/' + encodeURIComponent(g.name)).catch(function () { return null; });
      })).then(function (cur) {
        var grow = document.createDocumentFragment();
        groups.forEach(function (g, i) {
          var ps = (cur[i] && cur[i][name] && cur[i][name].partitions) || [];
          var cursors = ps.slice(0, 8).map(function (p) { return p.partition + ': ' + num(p.committedOffset) + '/' + num(p.lastOffset); }).join(', ') + (ps.length > 8 ? ', …' : '');
          var tr = el('tr', {'data-group': g.name});
          tr.appendChild(td(g.name));
          tr.appendChild(td(g.state));
          tr.appendChild(td(num(g.totalLag), 'lag'));
          tr.appendChild(td(dur(g.maxTimeLag)));
          tr.appendChild(td(cursors, 'cursor'));
          tr.appendChild(el('td', null, [
            el('button', {'class': 'seek-end', 'data-group': g.name, type: 'button', text: 'seek to end'}), ' ',
            el('button', {'class': 'delete-group', 'data-group': g.name, type: 'button', text: 'delete'})]));
          grow.appendChild(tr);
        });
        $('groups').replaceChildren(grow);
        return api('/api/v1/dlq?queue=' + qp + '&limit=20').then(function (d) {
          var drow = document.createDocumentFragment();
          ((d && d.messages) || []).forEach(function (x) {
            var tr = el('tr', {'data-transaction': x.transactionId});
            [x.failedAt, x.partition, x.consumerGroup, x.retryCount, x.errorMessage].forEach(function (v) { tr.appendChild(td(v)); });
            drow.appendChild(tr);
          });
          $('dlq').replaceChildren(drow);
        });
      });
    });
  }

  function refreshMaintenance() {
    return api('/api/v1/system/maintenance').then(function (d) {
      maint.push = !!(d && d.maintenanceMode);
      maint.pop = !!(d && d.popMaintenanceMode);
      $('maintenance-push').textContent = maint.push ? 'ON' : 'off';
      $('maintenance-pop').textContent = maint.pop ? 'ON' : 'off';
    });
  }

  // ---- rounds and routing -------------------------------------------------

  function round() {
    var q = currentQueue();
    $('home').hidden = !!q;
    $('queue-view').hidden = !q;
    if (q) $('queue-page').setAttribute('data-queue', q); else $('queue-page').removeAttribute('data-queue');
    var jobs = [refreshMaintenance()];
    if (q) jobs.push(refreshQueue(q)); else jobs.push(refreshCluster(), refreshQueues());
    // allSettled: one failing read must not stop the others' updates.
    return Promise.all(jobs.map(function (p) { return p.then(function () { return null; }, function (e) { return e; }); }))
      .then(function (errs) {
        var bad = errs.filter(function (e) { return e && e.status !== 401; });
        if (!errs.some(function (e) { return e && e.status === 401; }) && authNeeded) { authNeeded = false; $('login').hidden = true; }
        if (bad.length && !actionError) showError(bad[0].message); else if (!bad.length && !actionError) clearError();
      });
  }

  // One round at a time: the timer and clicks both go through now(); a
  // click during a round asks for another right after it.
  var running = false, again = false;
  function schedule() { if (timer === null) timer = setTimeout(now, 2000); }
  function now() {
    if (timer !== null) { clearTimeout(timer); timer = null; }
    if (running) { again = true; return; }
    running = true;
    var done = function () {
      running = false;
      if (again) { again = false; now(); } else schedule();
    };
    round().then(done, done);
  }

  // ---- actions ----------------------------------------------------------

  var actionError = false;
  function act(question, path, opts) {
    if (!window.confirm(question)) return;
    api(path, opts).then(function () { actionError = false; clearError(); now(); },
      function (e) { actionError = true; showError(e.message); });
  }

  document.addEventListener('click', function (ev) {
    var b = ev.target.closest ? ev.target.closest('button') : null;
    if (!b) return;
    var q = currentQueue(), g = b.getAttribute('data-group');
    if (b.classList.contains('seek-end') && q) {
      act('Move group "' + g + '" to the end of queue "' + q + '"? Unconsumed messages are skipped for it.',
        '/api/v1/consumer-groups/' + encodeURIComponent(g) + '/queues/' + encodeURIComponent(q) + '/seek', {method: 'POST', body: {toEnd: true}});
    } else if (b.classList.contains('delete-group') && q) {
      act('Delete consumer group "' + g + '" on queue "' + q + '"?',
        '/api/v1/consumer-groups/' + encodeURIComponent(g) + '/queues/' + encodeURIComponent(q), {method: 'DELETE'});
    } else if (b.id === 'maintenance-push') {
      act((maint.push ? 'Turn OFF' : 'Turn ON') + ' push maintenance for the whole cluster?', '/api/v1/system/maintenance', {method: 'POST', body: {enabled: !maint.push}});
    } else if (b.id === 'maintenance-pop') {
      act((maint.pop ? 'Turn OFF' : 'Turn ON') + ' pop maintenance for the whole cluster?', '/api/v1/system/maintenance/pop', {method: 'POST', body: {enabled: !maint.pop}});
    } else if (b.id === 'login-submit') {
      try { sessionStorage.setItem(TOKEN_KEY, $('token').value.trim()); } catch (e) { /* storage off: nothing kept */ }
      $('token').value = '';
      actionError = false;
      now();
    } else if (b.id === 'prev') {
      offset = Math.max(0, offset - PAGE); now();
    } else if (b.id === 'next') {
      if (offset + PAGE < total) { offset += PAGE; now(); }
    }
  });
  // Debounced: one query when typing pauses, from the first page.
  var searchTimer = null;
  $('queue-search').addEventListener('input', function () {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(function () { offset = 0; now(); }, 300);
  });
  // Enter in the token field submits the form: keep the page, sign in.
  $('login').addEventListener('submit', function (ev) { ev.preventDefault(); $('login-submit').click(); });
  window.addEventListener('hashchange', function () { actionError = false; clearError(); now(); });
  now();
})();
