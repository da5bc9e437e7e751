// How bindery's codes and numbers read to people. The codes stay visible next to the words
// (operators search logs for them); the words come first.
import {h, externalLink} from './dom.js';

const statusWords = {
  APPROVAL_SENDING: 'Sending to approval',
  APPROVAL_SENT: 'Waiting for approval',
  MR_CREATING: 'Approved, in the merge queue',
  MR_CREATED: 'Merge request open',
  MERGING: 'Merging',
  MERGED: 'Merged, waiting for deploy',
  VALIDATED: 'In effect',
  CREATE_FAILED: 'Failed before merge',
  HANDLE_FAILED: 'Failed while merging',
  REJECTED: 'Rejected',
  CLOSED: 'Closed',
};

// The tone of a status colours its badge: in progress, done, failed, finished without effect.
const statusTone = {
  VALIDATED: 'ok', CREATE_FAILED: 'bad', HANDLE_FAILED: 'bad', REJECTED: 'off', CLOSED: 'off',
};

/** statusBadge shows a binding status in words, its code beside it (codes: operators only). */
export function statusBadge(status, codes = true) {
  return h('span', {class: `badge tone-${statusTone[status] || 'busy'}`, 'data-status': status},
    statusWords[status] || status, codes ? [' ', h('code', {}, status)] : null);
}

/**
 * stateBadge names a request's state in its requester's words (the view's label, the server's
 * sentence table: the same words on every page), toned by where it is: done, stopped, failed,
 * finished without effect, or on its way.
 */
export function stateBadge(r) {
  let tone = statusTone[r.status] || 'busy';
  if (r.status === 'VALIDATED' && r.nextAction !== 'NONE') tone = 'busy'; // its removal runs
  if (r.nextAction === 'WAIT_MANUAL' && tone === 'busy') tone = 'warn';
  // The status stays in an attribute (pages and tests find a state by it), never in the text.
  return h('span', {class: `badge tone-${tone}`, 'data-state': r.label || '', 'data-status': r.status}, r.label || statusWords[r.status] || '—');
}

const actionTone = {NONE: 'ok', WAIT: 'busy', WAIT_MANUAL: 'warn', CONTACT_SUPPORT: 'bad', REAPPLY: 'off'};
const actionWords = {
  NONE: 'Done', WAIT: 'Nothing to do', WAIT_MANUAL: 'Operators alerted', CONTACT_SUPPORT: 'Withdraw or ask for help', REAPPLY: 'You can apply again',
};
// What an operator reads of the same: they are the ones who act, never "contact support".
const opsActionWords = {...actionWords, WAIT_MANUAL: 'Retry', CONTACT_SUPPORT: 'Retry or withdraw'};

/** nextActionBadge says what to do next, for the requester or (forOps) for an operator. */
export function nextActionBadge(action, forOps = false) {
  const words = forOps ? opsActionWords : actionWords;
  return h('span', {class: `badge tone-${actionTone[action] || 'busy'}`, 'data-next-action': action}, words[action] || action);
}

export function toneOfAction(action) {
  return actionTone[action] || 'busy';
}

const batchTone = {RUNNING: 'busy', BLOCKED: 'warn', SUCCEEDED: 'ok', FAILED: 'bad'};
export function batchBadge(status) {
  return h('span', {class: `badge tone-${batchTone[status] || 'busy'}`, 'data-batch-status': status}, status);
}

// What a car's pipeline does (api.CarAhead.Pipeline, batch.CarState), in words and a tone.
const pipelineWords = {
  building: ['building its branch', 'busy'], running: ['pipeline running', 'busy'], passed: ['pipeline passed', 'ok'],
  failed: ['pipeline failed', 'bad'], blocked: ['blocked', 'warn'],
};
export function pipelineBadge(state) {
  const [words, tone] = pipelineWords[state] || [state, 'busy'];
  return h('span', {class: `badge tone-${tone}`, 'data-pipeline-state': state}, words);
}

/** stepName is a step in plain words: the server's step table gives them (step.label). */
export function stepName(step) {
  if (step && step.label) return step.label;
  if (!step || !step.name) return step && step.code ? `Step ${step.code}` : '—';
  const s = step.name.toLowerCase().replace(/_/g, ' ');
  return s.charAt(0).toUpperCase() + s.slice(1);
}

const stageWords = {
  approval: 'Approval', batch: 'Waiting for a batch', ci: 'CI pipeline', merge: 'Merge', deploy: 'Deploy',
  effect: 'In effect', close: 'Removing', revoked: 'Removed',
};
export function stageName(stage) {
  return stageWords[stage] || (stage ? stage.charAt(0).toUpperCase() + stage.slice(1) : '—');
}

/**
 * linkify shows a server note with its web addresses as links. An address the note names ("pipeline
 * 12: https://…", "merge request !4: https://…") becomes a link on those words, without the raw
 * address, which would break mid-word on a phone; another one keeps the address as its words.
 */
export function linkify(text) {
  if (!text) return [];
  text = localTimes(text);
  // An address ends before the punctuation of the sentence it ends ("…: https://x/help.").
  const parts = text.split(/(https?:\/\/[^\s)]*[^\s).,;:!?])/);
  const out = [];
  parts.forEach((part, i) => {
    if (i % 2 === 0) {
      out.push(part);
      return;
    }
    // "pipeline 12: <url>" or "pipeline 12 (<url>)".
    const named = /(pipeline \d+|merge request !\d+|MR !\d+|job \S+ #\d+)(: | \()$/.exec(out[out.length - 1]);
    if (!named) {
      out.push(externalLink(part, part));
      return;
    }
    out[out.length - 1] = out[out.length - 1].slice(0, named.index);
    out.push(externalLink(part, named[1]));
    if (named[2] === ' (' && parts[i + 1] && parts[i + 1].startsWith(')')) parts[i + 1] = parts[i + 1].slice(1);
  });
  return out;
}

/** duration formats nanoseconds (the API's durationNs) or milliseconds (ms=true) compactly. */
export function duration(value, ms = false) {
  let s = Math.max(0, Math.round(ms ? value / 1e3 : value / 1e9));
  if (!Number.isFinite(s)) return '—';
  if (s < 60) return `${s}s`;
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  return `${m}m ${s}s`;
}

/** since is how long ago an ISO time was, as a duration. */
export function since(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? '—' : duration(Date.now() - t, true);
}

/**
 * time shows an ISO time in the reader's locale and zone, one format on every page: the clock
 * (hours and minutes) if today, else date and clock; the full time with its zone on hover.
 */
export function time(iso) {
  const t = new Date(iso);
  if (!iso || Number.isNaN(t.getTime())) return h('span', {}, '—');
  return h('time', {datetime: t.toISOString(), title: t.toLocaleString([], {timeZoneName: 'short'})}, clockText(t));
}

function clockText(t, zone = false) {
  const today = new Date().toDateString() === t.toDateString();
  const opts = today ? {hour: '2-digit', minute: '2-digit'} : {year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit'};
  if (zone) opts.timeZoneName = 'short';
  return today ? t.toLocaleTimeString([], opts) : t.toLocaleString([], opts);
}

/**
 * localTimes says the server's times in a sentence ("since 16:53 UTC", "until Mar 2 08:15 UTC":
 * the database clock's, on today's date unless it names one) in the reader's locale and zone, with
 * the zone named — the same clock as the times beside them. A time after a full date ("Fri 11
 * Dec 2026 09:00 UTC") stays as written.
 */
export function localTimes(text) {
  const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  return text.replace(/(?<!\d{4} )\b(?:(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{1,2}) )?(\d{2}):(\d{2}) UTC\b/g, (all, mon, day, hh, mm) => {
    const now = new Date();
    const t = new Date(Date.UTC(now.getUTCFullYear(), mon ? months.indexOf(mon) : now.getUTCMonth(), mon ? Number(day) : now.getUTCDate(), Number(hh), Number(mm)));
    return Number.isNaN(t.getTime()) ? all : clockText(t, true);
  });
}

/** plural says a count with its noun: "1 delivery", "2 deliveries", "1 request", "3 requests". */
export function plural(n, word) {
  if (n === 1) return `${n} ${word}`;
  return `${n} ${/[^aeiou]y$/.test(word) ? `${word.slice(0, -1)}ies` : `${word}s`}`;
}

/** ordinal: 1 → 1st, 2 → 2nd, 11 → 11th. */
export function ordinal(n) {
  const tens = n % 100;
  if (tens >= 11 && tens <= 13) return `${n}th`;
  return n + ({1: 'st', 2: 'nd', 3: 'rd'}[n % 10] || 'th');
}

/** ttl shows a target's expiry (a Go duration string as GET /api/targets sends it, "720h", or
 * nanoseconds), in days when it is whole days, as the catalog writes it ("30d"). */
export function ttl(value) {
  if (!value) return 'does not expire';
  // The file's expiresAt is the request's time plus the target's ttl.
  const ns = typeof value === 'number' ? value : goDuration(value);
  if (ns === null) return `expires ${value} after you apply`;
  return `expires ${days(ns) || duration(ns)} after you apply`;
}

/** goDuration reads a Go duration string ("720h", "1h30m", "90s") as nanoseconds; null if it
 * is not one. */
export function goDuration(text) {
  const units = {h: 3600e9, m: 60e9, s: 1e9, ms: 1e6};
  const parts = [...String(text).matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)];
  if (!parts.length || parts.map((p) => p[0]).join('') !== text) return null;
  return parts.reduce((ns, p) => ns + Number(p[1]) * units[p[2]], 0);
}

/** days says a duration in nanoseconds as whole days ("30 days"); '' when it is not whole days. */
export function days(ns) {
  const d = ns / (86400 * 1e9);
  if (!Number.isInteger(d) || d <= 0) return '';
  return `${d} day${d === 1 ? '' : 's'}`;
}

// What one project's batch round did: the server's RoundOutcome codes (server/openapi.json,
// api.RoundOutcomes), each in words. A test holds this table to the server's list.
const roundWords = {
  CLAIMED: (p) => `started batch #${p.batchId} with ${p.claimed || 0} request${p.claimed === 1 ? '' : 's'}`,
  SLOT_OCCUPIED: () => 'the merge train of this project is full; the waiting requests go into the next batch',
  NOTHING_WAITING: () => 'nothing was waiting',
  NOT_DUE: () => 'requests are waiting, but not enough to fill a batch and none long enough (batch.maxRequests, batch.maxWait)',
  PAUSED: () => 'the queue of this project is paused by an operator; nothing is batched until it is resumed',
  SPACED: () => 'the next batch of this project follows its newest one at an even spacing over a pipeline (batch.train)',
  ERROR: () => 'the round failed here (the log has the cause); the next round tries again',
};

/** roundOutcome is one project's round result in words: "infra/access-config: nothing was waiting". */
export function roundOutcome(p) {
  const words = roundWords[p.outcome];
  return `${p.partition}: ${words ? words(p) : `outcome ${p.outcome}`}`;
}

// Where a key's effective value comes from (the config view's status).
const keySourceWords = {
  set: 'set in the file', default: 'default', fallback: 'invalid, the default applies', flag: 'command-line flag',
};
export function keySource(status) {
  return keySourceWords[status] || status;
}

// The actions of the audit log, in words (server/ops.go, the revoke handler, workflow/validate.go,
// signing in and API tokens: server/signin.go, server/tokens.go, server/credentials.go).
const auditActionWords = {
  'ops.batches.run': 'Ran a batch round', 'ops.batches.settle': 'Settled a batch', 'ops.requests.retry': 'Retried a request',
  'ops.reconcile': 'Ran reconciliation', revoke: 'Revoked a request', withdraw: 'Withdrew a failed request', 'hook.deploy.refused': 'Refused a deploy callback',
  'ops.trains.pause': 'Paused a queue', 'ops.trains.resume': 'Resumed a queue', 'ops.requests.next': 'Sent a request into the next car',
  'ops.drift.restore': 'Restored a drifted file', 'ops.drift.accept': 'Accepted a drifted file', 'ops.drift.ignore': 'Ignored a drifted file',
  'ops.import': 'Imported the repository', import: 'Imported the repository',
  signin: 'Signed in', signout: 'Signed out', 'token.create': 'Made an API token', 'token.revoke': 'Revoked an API token', 'token.use': 'Used an API token',
};
export function auditAction(action) {
  return h('span', {}, auditActionWords[action] || action, auditActionWords[action] ? [' ', h('code', {class: 'muted small'}, action)] : null);
}

/**
 * paramList shows an audit entry's parameters as a list: nested values by their path
 * ("a.b"), and without the reserved keys (__authenticatedOperator and every other "__" key:
 * the server writes them, the Who column already says it).
 */
export function paramList(params) {
  let p = params;
  if (typeof p === 'string') {
    try { p = JSON.parse(p); } catch (e) { return h('code', {}, p); }
  }
  const rows = [];
  const walk = (prefix, v) => {
    if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) {
      for (const [k, x] of Object.entries(v)) if (!k.startsWith('__')) walk(prefix ? `${prefix}.${k}` : k, x);
    } else if (prefix) {
      rows.push([prefix, Array.isArray(v) ? v.map((x) => (typeof x === 'object' ? JSON.stringify(x) : String(x))).join(', ') : typeof v === 'object' ? JSON.stringify(v) : String(v)]);
    }
  };
  walk('', p);
  if (!rows.length) return h('span', {class: 'muted'}, 'none');
  return h('dl', {class: 'pairs params'}, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}
