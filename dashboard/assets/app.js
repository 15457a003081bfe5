// queen-node dashboard (docs/operations.md, "Dashboard"): plain JS and
// plain SVG, no build step. One refresh round every 2 s, scheduled with
// setTimeout after the previous round completes, so requests never pile up.
'use strict';
(function () {
  var TOKEN_KEY = 'queen-token';
  var PAGE = 50;               // queues per page (the API caps limits too)
  var WINDOW_MS = 15 * 60e3;   // charts span this much: history from the sampler, then live samples
  var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];
  var $ = function (id) { return document.getElementById(id); };
  var offset = 0, total = 0;
  var prev = {};     // node name -> {t, <key>: counter}: last /status counters, for rates
  var hist = {};     // node name -> [{t, live, <key>: value}] over WINDOW_MS, oldest first
  var historyFor = null; // the token the sampler's history was last read with
  var historyErr = '';   // why that read failed, shown above the charts
  var maint = {push: null, pop: null};
  var authNeeded = false;
  var timer = null;

  function token() { try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; } }

  // api fetches a JSON endpoint; base is '' (this node) or 'http://host:port'
  // (another member: its own figures, with a shorter timeout). Every call
  // has a timeout, so a member that accepts and never answers cannot hold a
  // round, and with it every later round, forever.
  // 401 shows the login box; any other failure throws an Error carrying the
  // server's {"error": ...} text and status (0 for a timeout).
  var TIMEOUT_MS = 10000, MEMBER_TIMEOUT_MS = 3000;
  function api(path, opts, base) {
    opts = opts || {};
    var headers = {};
    if (token()) headers.Authorization = 'Bearer ' + token();
    if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
    var ms = opts.timeoutMs || (base ? MEMBER_TIMEOUT_MS : TIMEOUT_MS);
    var ctl = new AbortController();
    var abortTimer = setTimeout(function () { ctl.abort(); }, ms);
    // The timer covers the body too: a server that sends its headers and
    // then stalls is cut off as well.
    return fetch((base || '') + path, {
      method: opts.method || 'GET', headers: headers, signal: ctl.signal,
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
    }).then(function (data) {
      clearTimeout(abortTimer);
      return data;
    }, function (e) {
      clearTimeout(abortTimer);
      if (ctl.signal.aborted) {
        var err = new Error((base || 'this node') + path + ': no answer within ' + ms / 1000 + ' s' +
          (opts.method && opts.method !== 'GET' ? ' (it may still have been applied: check before trying again)' : ''));
        err.status = 0;
        throw err;
      }
      throw e;
    });
  }

  // memberBase is where to ask another member for its own figures, or null
  // when it must not be asked. With a token, only when the mesh is
  // encrypted (QUEEN_MESH_SECRET): on an open mesh anyone who reaches the
  // gossip port can join and advertise an address of its own, and the page
  // would send it the token.
  function memberBase(m, self) {
    if (m.self || m.state !== 'alive' || !m.http_addr) return null;
    if (token() && !get(self, 'mesh.encrypted')) return null;
    return location.protocol + '//' + m.http_addr;
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
    var h = hist[m.name], last = h && h.length && h[h.length - 1].live ? h[h.length - 1] : null;
    tr.appendChild(td(dur(get(st, 'node.uptime_s'))));
    tr.appendChild(td(last ? fmt(last.push) : ''));
    tr.appendChild(td(last ? fmt(last.pop) : ''));
    tr.appendChild(td(last ? fmt(last.ack) : ''));
    tr.appendChild(td(num(get(st, 'requests.parked_long_polls'))));
    tr.appendChild(td(num(get(st, 'pg.acquired_conns')) + '/' + num(get(st, 'pg.max_conns'))));
    tr.appendChild(td(num(get(st, 'mesh.frames_sent')) + ' fr / ' + num(get(st, 'mesh.hints_sent'))));
    tr.appendChild(td(num(get(st, 'mesh.frames_received')) + ' fr / ' + num(get(st, 'mesh.hints_received'))));
    tr.appendChild(td(drops(st)));
    tr.appendChild(td(num(get(st, 'mesh.gaps_seen'))));
    tr.appendChild(td(num(get(st, 'hotlist.reseeds'))));
    return tr;
  }

  // The charted figures: rate ones from a /status counter (live) or a
  // system-metrics per-second rate (history); level ones from a /status
  // gauge or a system-metrics level (docs/operations.md, "Dashboard").
  function drops(st) { return num(get(st, 'mesh.frames_dropped')) + num(get(st, 'mesh.frames_queue_dropped')) + num(get(st, 'mesh.coalescer.dropped')); }
  var METRICS = [
    {key: 'push', title: 'push msg/s', rate: 'requests.pushed_messages', hist: 'requests.pushed_per_s'},
    {key: 'pop', title: 'pop msg/s', rate: 'requests.popped_messages', hist: 'requests.popped_per_s'},
    {key: 'ack', title: 'ack/s', rate: 'requests.acks', hist: 'requests.acks_per_s'},
    {key: 'parked', title: 'parked long-polls', level: 'requests.parked_long_polls', hist: 'longpoll.parked'},
    {key: 'pool', title: 'pool conns in use', level: 'pg.acquired_conns', hist: 'database.pool_active'},
    {key: 'frames_sent', title: 'hint frames sent/s', rate: 'mesh.frames_sent', hist: 'mesh.frames_sent_per_s'},
    {key: 'frames_received', title: 'hint frames received/s', rate: 'mesh.frames_received', hist: 'mesh.frames_received_per_s'},
    {key: 'hints_sent', title: 'hints sent/s', rate: 'mesh.hints_sent', hist: 'mesh.hints_sent_per_s'},
    {key: 'hints_received', title: 'hints received/s', rate: 'mesh.hints_received', hist: 'mesh.hints_received_per_s'},
    {key: 'drops', title: 'drops/s', rate: drops, hist: 'mesh.dropped_per_s'},
    {key: 'gaps', title: 'gaps/s', rate: 'mesh.gaps_seen', hist: 'mesh.gaps_per_s'},
    {key: 'reseeds', title: 'reseeds/s', rate: 'hotlist.reseeds', hist: 'hotlist.reseeds_per_s'}
  ];
  function val(st, f) { return typeof f === 'function' ? f(st) : num(get(st, f)); }

  function trim(h, now) { while (h.length && h[0].t < now - WINDOW_MS) h.shift(); }

  // record appends a live point computed from a member's /status: rates
  // from the change of its counters since the previous round.
  function record(name, st) {
    var now = Date.now(), c = {t: now};
    METRICS.forEach(function (m) { if (m.rate) c[m.key] = val(st, m.rate); });
    var p = prev[name];
    prev[name] = c;
    if (!p || c.t <= p.t) return; // first round: no rate yet
    // A counter that went back means the node restarted.
    if (METRICS.some(function (m) { return m.rate && c[m.key] < p[m.key]; })) return;
    var dt = (c.t - p.t) / 1000, pt = {t: now, live: true};
    METRICS.forEach(function (m) { pt[m.key] = m.rate ? (c[m.key] - p[m.key]) / dt : val(st, m.level); });
    var h = hist[name] || (hist[name] = []);
    h.push(pt);
    trim(h, now);
  }

  // loadHistory reads the sampler's last WINDOW_MS per node, 10 s buckets
  // (each bucket's average), and puts it before the live points. Once per
  // token: the live points take over from there.
  function loadHistory() {
    historyFor = token();
    historyErr = '';
    var from = new Date(Date.now() - WINDOW_MS).toISOString();
    return api('/api/v1/analytics/system-metrics?interval=10s&from=' + encodeURIComponent(from)).then(function (d) {
      var now = Date.now();
      ((d && d.replicas) || []).forEach(function (r) {
        var live = (hist[r.hostname] || []).filter(function (x) { return x.live; });
        var first = live.length ? live[0].t : Infinity;
        var pts = [];
        (r.timeSeries || []).forEach(function (s) {
          var t = Date.parse(s.timestamp);
          if (!(t < first)) return;
          var pt = {t: t, live: false};
          METRICS.forEach(function (m) { pt[m.key] = num(get(s.metrics, m.hist + '.avg')); });
          pts.push(pt);
        });
        var h = pts.concat(live);
        trim(h, now);
        hist[r.hostname] = h;
      });
    }, function (e) {
      // No history is no reason to stop the page: the live points still
      // come. Said above the charts (the error bar is cleared every round).
      if (e.status !== 401) historyErr = 'chart history unavailable until the page is reloaded: ' + e.message;
    });
  }

  // chart draws one metric of every node as SVG polylines over WINDOW_MS,
  // one line per node; data-points, data-history-points (from the sampler)
  // and data-oldest (ms) say what it drew.
  function chart(m) {
    var W = 300, H = 90, now = Date.now(), max = 0, count = 0, fromHistory = 0, oldest = now;
    var names = Object.keys(hist).sort();
    var shown = {};
    names.forEach(function (n) {
      shown[n] = hist[n].filter(function (s) { return s.t >= now - WINDOW_MS; });
      shown[n].forEach(function (s) {
        max = Math.max(max, s[m.key]); count++; oldest = Math.min(oldest, s.t);
        if (!s.live) fromHistory++;
      });
    });
    var top = max > 0 ? max : 1;
    var ns = 'http://www.w3.org/2000/svg';
    var svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('width', W); svg.setAttribute('height', H);
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    svg.setAttribute('data-metric', m.key);
    svg.setAttribute('data-points', String(count));
    svg.setAttribute('data-history-points', String(fromHistory));
    if (count) svg.setAttribute('data-oldest', String(oldest));
    var axis = document.createElementNS(ns, 'path');
    axis.setAttribute('d', 'M0 ' + (H - 1) + ' H' + W);
    axis.setAttribute('stroke', '#ccc');
    svg.appendChild(axis);
    var label = document.createElementNS(ns, 'text');
    label.setAttribute('x', '2'); label.setAttribute('y', '10');
    label.setAttribute('class', 'ymax');
    label.textContent = fmt(max);
    svg.appendChild(label);
    var legend = el('div', {'class': 'legend'});
    names.forEach(function (n, i) {
      var pts = shown[n].map(function (s) {
        var x = W - (now - s.t) / WINDOW_MS * W, y = H - 2 - s[m.key] / top * (H - 14);
        return x.toFixed(1) + ',' + y.toFixed(1);
      }).join(' ');
      var line = document.createElementNS(ns, 'polyline');
      line.setAttribute('points', pts);
      line.setAttribute('fill', 'none');
      line.setAttribute('stroke', COLORS[i % COLORS.length]);
      line.setAttribute('stroke-width', '1.5');
      line.setAttribute('data-node', n);
      svg.appendChild(line);
      var sw = el('span', {text: '\u25A0 ' + n});
      sw.style.color = COLORS[i % COLORS.length];
      legend.appendChild(sw);
    });
    return el('div', {'class': 'chart'}, [el('div', {'class': 't', text: m.title}), svg, legend]);
  }
  function drawCharts() {
    // A node with no point left in the window (gone for 15 minutes) leaves
    // the charts and its legend, so a long-open tab does not keep every
    // name it ever saw.
    var cut = Date.now() - WINDOW_MS;
    Object.keys(hist).forEach(function (n) {
      trim(hist[n], Date.now());
      if (!hist[n].length && !(prev[n] && prev[n].t >= cut)) { delete hist[n]; delete prev[n]; }
    });
    var parts = METRICS.map(chart);
    if (historyErr) parts.unshift(el('div', {'class': 'history-error', text: historyErr}));
    $('charts').replaceChildren.apply($('charts'), parts);
  }

  // /status needs admin: a token below it is told once, in the table, and
  // /status is not asked again until the token changes (no 403 every 2 s).
  var statusForbiddenFor = null;
  function refreshCluster() {
    // The history first (once per token), so the first charts have it.
    var history = historyFor === token() ? Promise.resolve() : loadHistory();
    if (statusForbiddenFor !== null && statusForbiddenFor === token()) return history;
    return history.then(function () { return api('/status'); }).catch(function (e) {
      if (e.status !== 403) throw e;
      statusForbiddenFor = token();
      $('members').replaceChildren(el('tr', null, [el('td', {colspan: '14', text: 'The cluster view reads /status, which needs an admin token: ' + e.message})]));
      // system-metrics is read-only: the charts still show the sampler's
      // history (as of this token's first round), without live points.
      drawCharts();
      return null;
    }).then(function (self) {
      if (!self) return;
      $('node-name').textContent = get(self, 'node.name') || '';
      var members = get(self, 'mesh.members') || [];
      if (!members.length) members = [{name: get(self, 'node.name') || 'this node', state: 'alive', self: true, version: get(self, 'node.version')}];
      members = members.slice().sort(function (a, b) { return a.name < b.name ? -1 : a.name > b.name ? 1 : 0; });
      // Every alive member's own /status, straight from its http_addr
      // (CORS is open); a dead or left member is not asked, nor any with a
      // token on an open mesh (memberBase).
      var withheld = false;
      return Promise.all(members.map(function (m) {
        if (m.self) return Promise.resolve(self);
        var base = memberBase(m, self);
        // The note is for members left out by the token rule only.
        if (!base) { withheld = withheld || (m.state === 'alive' && !!m.http_addr && !!token()); return Promise.resolve(null); }
        return api('/status', null, base).catch(function () { return null; });
      })).then(function (stats) {
        $('members-note').hidden = !withheld;
        var body = $('members');
        var rows = document.createDocumentFragment();
        members.forEach(function (m, i) {
          if (stats[i]) record(m.name, stats[i]);
          rows.appendChild(memberRow(m, stats[i]));
        });
        body.replaceChildren(rows);
        drawCharts();
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
      // Queues deleted meanwhile can leave the page past the end: go to
      // the last page on the next round.
      if (offset > 0 && offset >= total) { offset = Math.max(0, (Math.ceil(total / PAGE) - 1) * PAGE); again = true; }
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

  // currentQueue is the queue named by the address, or null (the home
  // page); a malformed escape (a hand-edited '#/queue/%') is shown as an
  // error on the home page rather than thrown into a round.
  var badHash = null;
  function currentQueue() {
    badHash = null;
    var m = /^#\/queue\/(.+)$/.exec(location.hash);
    if (!m) return null;
    try { return decodeURIComponent(m[1]); } catch (e) { badHash = location.hash; return null; }
  }

  function refreshQueue(name) {
    var qp = encodeURIComponent(name);
    return api('/api/v1/resources/queues/' + qp + '?partitionOrder=busiest&partitionLimit=100').then(function (q) {
      $('queue-title').textContent = name;
      var m = q.messages || {};
      $('queue-summary').textContent = 'namespace ' + (q.namespace || '-') + ', task ' + (q.task || '-') + ', ' +
        num(q.partitionCount) + ' partitions' + (q.partitionsTruncated ? ' (the busiest ' + (q.partitions || []).length + ' listed)' : '') +
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
        // This queue's cursors only, the 50 most lagging, with counts over
        // all of them (docs/api.md: ?queue&limit).
        return api('/api/v1/consumer-groups/' + encodeURIComponent(g.name) + '?queue=' + qp + '&limit=50').catch(function () { return null; });
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
            el('button', {'class': 'seek-time', 'data-group': g.name, type: 'button', text: 'seek to time'}), ' ',
            el('button', {'class': 'delete-group', 'data-group': g.name, type: 'button', text: 'delete'})]));
          grow.appendChild(tr);
        });
        $('groups').replaceChildren(grow);
        return Promise.all([refreshHotlist(name, groups, cur), api('/api/v1/dlq?queue=' + qp + '&limit=20').then(function (d) {
          var drow = document.createDocumentFragment();
          ((d && d.messages) || []).forEach(function (x) {
            var tr = el('tr', {'data-transaction': x.transactionId});
            [x.failedAt, x.partition, x.consumerGroup, x.retryCount, x.errorMessage].forEach(function (v) { tr.appendChild(td(v)); });
            var key = {'data-partition-id': x.partitionId, 'data-transaction': x.transactionId, 'data-group': x.consumerGroup, type: 'button'};
            // A superseded entry (a seek or a group delete took it back)
            // can only be dropped (docs/api.md, "Retry or drop a dead letter").
            if (x.superseded) tr.setAttribute('data-superseded', 'true');
            tr.appendChild(el('td', null, [
              x.superseded ? el('span', {'class': 'note', text: 'superseded'}) : el('button', Object.assign({'class': 'dlq-retry', text: 'retry'}, key)), ' ',
              el('button', Object.assign({'class': 'dlq-drop', text: 'drop'}, key))]));
            drow.appendChild(tr);
          });
          $('dlq').replaceChildren(drow);
        })]);
      });
    });
  }

  // ---- hot-list beside PostgreSQL ------------------------------------------

  // hotlistMembers lists where to ask for a hot-list view: every alive
  // member from /status, or only this node ('' base) when /status is
  // refused (it needs admin) or the node runs without the mesh.
  function hotlistMembers() {
    var self = [{name: '', base: ''}];
    if (statusForbiddenFor !== null && statusForbiddenFor === token()) return Promise.resolve(self);
    return api('/status').then(function (st) {
      var ms = (get(st, 'mesh.members') || []).filter(function (m) { return m.self || memberBase(m, st); });
      if (!ms.length) return self;
      return ms.map(function (m) { return {name: m.name, base: m.self ? '' : memberBase(m, st)}; })
        .sort(function (a, b) { return a.name < b.name ? -1 : a.name > b.name ? 1 : 0; });
    }, function (e) {
      if (e.status !== 403) throw e;
      statusForbiddenFor = token();
      return self;
    });
  }

  function entryText(p) {
    var s = p.name + ' ' + p.state;
    if (p.state === 'wheel' && typeof p.dueInMs === 'number') s += ' ' + p.dueInMs + 'ms';
    if (p.state === 'inflight' && typeof p.heldMs === 'number') s += ' ' + p.heldMs + 'ms';
    return s + (p.unconfirmed ? '?' : '');
  }

  // refreshHotlist shows each alive member's rings of the queue (one
  // bounded request per member) beside PostgreSQL's view per group, read
  // from the cursors the groups table already fetched (cur).
  function refreshHotlist(name, groups, cur) {
    var path = '/api/v1/status/hotlist/' + encodeURIComponent(name) + '?limit=50';
    var pg = document.createDocumentFragment();
    groups.forEach(function (g, i) {
      var gq = (cur[i] && cur[i][name]) || {}, ps = gq.partitions || [];
      // The counts cover every cursor of the group on the queue; the names
      // only the most lagging ones the read returned.
      var pending = ps.filter(function (p) { return num(p.offsetLag) > 0; }).map(function (p) { return p.partition; });
      var leased = ps.filter(function (p) { return p.leaseActive; }).map(function (p) { return p.partition; });
      var np = typeof gq.pendingPartitions === 'number' ? gq.pendingPartitions : pending.length;
      var nl = typeof gq.leasedPartitions === 'number' ? gq.leasedPartitions : leased.length;
      var tr = el('tr', {'data-group': g.name, 'data-pending': String(np), 'data-leased': String(nl)});
      tr.appendChild(td(g.name));
      tr.appendChild(td(np));
      tr.appendChild(td(nl));
      tr.appendChild(td(pending.slice(0, 8).join(', ') + (np > Math.min(8, pending.length) ? ', …' : ''), 'cursor'));
      tr.appendChild(td(leased.slice(0, 8).join(', ') + (nl > Math.min(8, leased.length) ? ', …' : ''), 'cursor'));
      pg.appendChild(tr);
    });
    $('hotlist-pg').replaceChildren(pg);
    return hotlistMembers().then(function (ms) {
      return Promise.all(ms.map(function (m) {
        return api(path, null, m.base).catch(function (e) { return {error: e.message}; });
      })).then(function (views) {
        var rows = document.createDocumentFragment();
        views.forEach(function (v, i) {
          var node = (v && v.node) || ms[i].name || 'this node';
          if (!v || v.error || !v.registered || !(v.rings || []).length) {
            var why = !v || v.error ? 'unreachable: ' + (v && v.error) : v.enabled === false ? 'hot-list off (QUEEN_HOTLIST=0)' : 'no rings for this queue on this node';
            var tr = el('tr', {'data-node': node, 'data-registered': 'false'});
            tr.appendChild(td(node));
            tr.appendChild(el('td', {colspan: '7', text: why}));
            rows.appendChild(tr);
            return;
          }
          v.rings.forEach(function (r) {
            var tr = el('tr', {'data-node': node, 'data-group': r.group, 'data-ready': String(num(r.ready)),
              'data-wheel': String(num(r.wheel)), 'data-inflight': String(num(r.inflight))});
            tr.appendChild(td(node));
            tr.appendChild(td(r.group));
            tr.appendChild(td(num(r.ready)));
            tr.appendChild(td(num(r.wheel)));
            tr.appendChild(td(num(r.inflight)));
            tr.appendChild(td(r.cold ? 'cold' : r.reseeding ? 'reseeding' : num(r.nextReseedInMs) <= 0 ? 'due now' : 'in ' + dur(num(r.nextReseedInMs) / 1000)));
            var ps = r.partitions || [];
            tr.appendChild(td(ps.slice(0, 8).map(entryText).join(', ') + (ps.length > 8 || r.partitionsTruncated ? ', …' : ''), 'cursor'));
            tr.appendChild(td(num(r.unconfirmed)));
            rows.appendChild(tr);
          });
        });
        $('hotlist').replaceChildren(rows);
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
    if (badHash) jobs.push(Promise.reject(new Error('not a queue address: ' + badHash)));
    // allSettled: one failing read must not stop the others' updates.
    return Promise.all(jobs.map(function (p) { return p.then(function () { return null; }, function (e) { return e; }); }))
      .then(function (errs) {
        var bad = errs.filter(function (e) { return e && e.status !== 401; });
        if (!errs.some(function (e) { return e && e.status === 401; }) && authNeeded) { authNeeded = false; $('login').hidden = true; }
        if (bad.length && !actionError) showError(bad[0].message); else if (!bad.length && !actionError) clearError();
      });
  }

  // One round at a time: the timer and clicks both go through now(); a
  // click during a round asks for another right after it. The pause is
  // 2 s, or twice the last round's duration when that is longer: a page
  // whose reads are heavy (the queue page of a queue with thousands of
  // partitions, docs/benchmarks.md) keeps the database busy at most a third
  // of the time.
  var running = false, again = false, lastRoundMs = 0;
  function pauseMs() { return Math.max(2000, 2 * lastRoundMs); }
  function schedule() { if (timer === null) timer = setTimeout(now, pauseMs()); }
  function now() {
    if (timer !== null) { clearTimeout(timer); timer = null; }
    if (running) { again = true; return; }
    running = true;
    var started = Date.now();
    var done = function () {
      running = false;
      lastRoundMs = Date.now() - started;
      if (again) { again = false; now(); } else schedule();
    };
    // A throw inside round() still schedules the next one.
    Promise.resolve().then(round).then(done, done);
  }

  // ---- actions ----------------------------------------------------------

  var actionError = false;
  // An action gets 60 s (a group delete or a seek on a large queue takes a
  // while); a timeout says it may have been applied all the same.
  function act(question, path, opts) {
    if (!window.confirm(question)) return;
    opts.timeoutMs = 60000;
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
    } else if (b.classList.contains('seek-time') && q) {
      // The time comes from the one #seek-time input above the table (not
      // re-rendered by the rounds, so typing in it is never interrupted).
      var when = $('seek-time').value ? new Date($('seek-time').value) : null;
      if (!when || isNaN(when.getTime())) { actionError = true; showError('Pick a time in the "Seek to a time" field first.'); return; }
      act('Move group "' + g + '" on queue "' + q + '" to the last message created at or before ' + when.toISOString() +
        '? It reads everything after that point again (or skips to it).',
        '/api/v1/consumer-groups/' + encodeURIComponent(g) + '/queues/' + encodeURIComponent(q) + '/seek', {method: 'POST', body: {timestamp: when.toISOString()}});
    } else if (b.classList.contains('delete-group') && q) {
      act('Delete consumer group "' + g + '" on queue "' + q + '"?',
        '/api/v1/consumer-groups/' + encodeURIComponent(g) + '/queues/' + encodeURIComponent(q), {method: 'DELETE'});
    } else if (b.classList.contains('dlq-retry') || b.classList.contains('dlq-drop')) {
      // docs/api.md, "Retry or drop a dead letter": the group is part of the key.
      var retry = b.classList.contains('dlq-retry'), tx = b.getAttribute('data-transaction');
      var dpath = '/api/v1/dlq/' + encodeURIComponent(b.getAttribute('data-partition-id')) + '/' + encodeURIComponent(tx) +
        (retry ? '/retry' : '') + '?consumerGroup=' + encodeURIComponent(g);
      act(retry ? 'Deliver dead letter "' + tx + '" again to group "' + g + '"?' : 'Drop dead letter "' + tx + '" of group "' + g + '" for good?',
        dpath, {method: retry ? 'POST' : 'DELETE'});
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
