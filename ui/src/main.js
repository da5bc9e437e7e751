// bindery's single-page application: the shell (header, navigation, demo user switcher) and a
// small history router that loads each page on demand. Pages are modules exporting
// mount(root, ctx) → cleanup; cleanup stops their polling when the reader leaves.
import './style.css';
import {h, swap, errorBox, loading} from './dom.js';
import {get, request} from './api.js';
import {poll} from './poll.js';

const routes = [
  {path: /^\/(?:apply\/?)?$/, nav: 'apply', load: () => import('./pages/apply.js')},
  {path: /^\/requests\/?$/, nav: 'requests', load: () => import('./pages/requests.js')},
  {path: /^\/requests\/([^/]+)\/?$/, nav: 'requests', load: () => import('./pages/request.js')},
  {path: /^\/reviews\/?$/, nav: 'reviews', load: () => import('./pages/reviews.js')},
  {path: /^\/reviews\/(\d+)\/?$/, nav: 'reviews', load: () => import('./pages/review.js')},
  {path: /^\/inbox\/?$/, nav: 'inbox', load: () => import('./pages/inbox.js')},
  {path: /^\/mailbox\/?$/, nav: 'mailbox', load: () => import('./pages/mailbox.js')},
  {path: /^\/settings\/?$/, nav: 'settings', load: () => import('./pages/settings.js')},
  {path: /^\/ops\/?$/, nav: 'ops', load: () => import('./pages/ops.js')},
];

const app = document.getElementById('app');
const main = h('main', {id: 'main', tabindex: '-1'});
const nav = h('nav', {'aria-label': 'Main'});
const who = h('div', {class: 'who'});
let me = null;
let cleanup = null;
let renderToken = 0;
// What waits for an operator (GET /api/ops/attention), shown on the console's item from every
// page; null before the first answer or for a caller who is not an operator.
let attention = null;
let attentionPoll = null;

function shell() {
  swap(app,
    h('a', {class: 'skip', href: '#main'}, 'Skip to content'),
    h('header', {class: 'top'},
      h('a', {class: 'brand', href: '/'}, h('span', {class: 'logo', 'aria-hidden': 'true'}, 'b'), 'bindery'),
      nav, who),
    main);
}

function renderNav(active) {
  const items = [['apply', '/', 'Apply'], ['requests', '/requests', 'My requests'], ['reviews', '/reviews', 'Reviews']];
  if (me && me.demo) items.push(['inbox', '/inbox', 'Approval inbox'], ['mailbox', '/mailbox', 'Mailbox']);
  if (me && me.ops) items.push(['ops', '/ops', 'Ops console']);
  if (me) items.push(['settings', '/settings', 'Settings']);
  swap(nav, h('ul', {}, items.map(([key, href, label]) =>
    h('li', {}, h('a', {href, 'aria-current': key === active ? 'page' : null}, label, key === 'ops' ? attentionCount() : null)))));
}

// attentionCount is the number of stuck requests, BLOCKED batches and open drift findings, on the
// console's item.
function attentionCount() {
  if (!attention || !attention.total) return null;
  const n = `${attention.total}${attention.more ? '+' : ''}`;
  const what = [attention.requests ? `${attention.requests}${attention.more ? '+' : ''} request${attention.requests === 1 ? '' : 's'}` : '',
    attention.blockedBatches ? `${attention.blockedBatches} blocked batch${attention.blockedBatches === 1 ? '' : 'es'}` : '',
    attention.drift ? `${attention.drift} drift finding${attention.drift === 1 ? '' : 's'}` : '',
    attention.reviews ? `${attention.reviews} overdue review${attention.reviews === 1 ? '' : 's'}` : ''].filter(Boolean).join(' and ');
  const verb = attention.total === 1 && !attention.more ? 'needs' : 'need';
  return h('span', {class: 'nav-count', id: 'attention-count', 'data-attention': attention.total, title: `${what} ${verb} an operator`},
    h('span', {'aria-hidden': 'true'}, n), h('span', {class: 'sr-only'}, `: ${what} ${verb} an operator`));
}

// watchAttention polls the count while the caller is an operator (the console's own actions ask
// for a fresh count at once: the event bindery:attention).
function watchAttention() {
  if (attentionPoll) attentionPoll.stop();
  attentionPoll = null;
  attention = null;
  if (!me || !me.ops) return;
  attentionPoll = poll(() => get('/api/ops/attention'), (a) => {
    attention = a;
    // In place: a redrawn navigation would take the keyboard focus from its links.
    const link = nav.querySelector('a[href="/ops"]');
    if (!link) return;
    const old = link.querySelector('.nav-count');
    const count = attentionCount();
    if (old) old.remove();
    if (count) link.append(count);
  }, () => {}, 15000);
}
addEventListener('bindery:attention', () => attentionPoll && attentionPoll.now());

function renderWho() {
  if (!me) {
    swap(who);
    return;
  }
  // The demo's switcher, unless the demo signs people in with an identity provider (then it
  // has no demo users to offer, and the header is a deployment's).
  if (!me.demo || !(me.demoUsers || []).length) {
    swap(who, h('span', {class: 'who-name', id: 'who-name', title: me.identity}, h('span', {class: 'who-words'}, 'Signed in as '), me.displayName || me.identity),
      me.signOut ? h('button', {type: 'button', id: 'sign-out', class: 'sign-out', 'data-focus': 'sign-out', onclick: signOut}, 'Sign out') : null);
    return;
  }
  const users = [...(me.demoUsers || [])];
  if (me.displayName && !users.includes(me.displayName)) users.unshift(me.displayName);
  const select = h('select', {id: 'user-switcher', 'data-focus': 'user'},
    users.map((u) => h('option', {value: u, selected: u === me.displayName}, u)));
  select.addEventListener('change', () => switchUser(select.value));
  swap(who, h('label', {for: 'user-switcher'}, h('span', {class: 'demo-tag'}, 'demo'), h('span', {class: 'who-words'}, ' Signed in as ')), select);
}

// demoUsersOf reads the demo users from the server's 401 in demo mode ("Pick a demo user: alice
// (holds payments-admin), bob, ops (the operator)."), each with who they are; none outside demo
// mode.
function demoUsersOf(err) {
  const m = /^Pick a demo user: (.+)\.$/.exec(err.message || '');
  if (!m) return [];
  return m[1].split(',').map((u) => /^\s*(\S+)(?: \((.+)\))?\s*$/.exec(u)).filter(Boolean).map((x) => ({name: x[1], who: x[2] || 'a requester'}));
}

// signOut ends the session (POST /auth/logout) and starts the page again: signed out, it shows
// "Sign in". A sign-out that did not reach the server says so and leaves the page as it was.
async function signOut() {
  try {
    await request('POST', '/auth/logout');
  } catch (err) {
    swap(main, h('h1', {}, 'Sign-out did not work'), errorBox(err, signOut));
    return;
  }
  me = null;
  boot();
}

// The demo identity is a cookie the server trusts in demo mode only (docs/api.md, 'Who may call').
async function switchUser(name) {
  document.cookie = `bindery_user=${encodeURIComponent(name)}; Path=/; SameSite=Lax; Max-Age=31536000`;
  await loadMe();
  render(false);
}

async function loadMe() {
  me = await get('/api/me');
  renderWho();
  watchAttention();
}

/** navigate moves to an in-app path without a page load. */
export function navigate(path, replace = false) {
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  render(true);
}

async function render(focus) {
  const token = ++renderToken;
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  const path = location.pathname;
  const route = routes.find((r) => r.path.test(path));
  renderNav(route ? route.nav : null);
  if (!route) {
    document.title = 'Not found · bindery';
    swap(main, h('h1', {tabindex: '-1'}, 'Page not found'),
      h('p', {}, 'There is no page at this address. ', h('a', {href: '/'}, 'Request access'), ' or see ', h('a', {href: '/requests'}, 'your requests'), '.'));
    if (focus) main.querySelector('h1').focus();
    return;
  }
  swap(main, loading('the page'));
  let page;
  try {
    page = await route.load();
  } catch (err) {
    // A page chunk that is gone after a release: reload once onto the current index (recovery.js).
    if (window.binderyRecover) window.binderyRecover();
    if (token === renderToken) {
      swap(main, h('h1', {tabindex: '-1'}, 'This page could not be loaded'),
        h('p', {}, 'A new version of bindery may have been released. Refreshing the page loads it.'));
    }
    return;
  }
  if (token !== renderToken) return;
  swap(main);
  const ctx = {
    me,
    params: path.match(route.path).slice(1).map(decodeURIComponent),
    query: new URLSearchParams(location.search),
    navigate,
    title: (t) => { document.title = `${t} · bindery`; },
  };
  cleanup = page.mount(main, ctx) || null;
  if (focus) focusHeading(token);
}

// focusHeading moves the keyboard focus to the page's heading after an in-app move (a link
// followed with Enter must not leave the focus on the body). A page that draws its heading only
// once its data came (a request) gets it then — unless the reader moved the focus meanwhile, or
// moved on to another page.
function focusHeading(token) {
  const put = () => {
    const heading = main.querySelector('h1');
    if (!heading) return false;
    heading.setAttribute('tabindex', '-1');
    if (!heading.hasAttribute('data-focus')) heading.setAttribute('data-focus', 'page-heading'); // kept through live redraws (swap)
    heading.focus();
    return true;
  };
  if (put()) return;
  const watch = new MutationObserver(() => {
    const idle = !document.activeElement || document.activeElement === document.body;
    if (token !== renderToken || !idle) watch.disconnect();
    else if (put()) watch.disconnect();
  });
  watch.observe(main, {childList: true, subtree: true});
  setTimeout(() => watch.disconnect(), 30000);
}

// In-app links navigate without a page load; modified clicks and new-tab links behave as usual.
document.addEventListener('click', (e) => {
  const a = e.target.closest && e.target.closest('a[href]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  if (a.target || a.hasAttribute('download') || a.hasAttribute('data-reload')) return; // data-reload: a page outside the app
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.hash && url.pathname === location.pathname) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
});
addEventListener('popstate', () => render(true));

// signIn is the page of a caller without an identity outside demo mode. When bindery signs
// people in itself (OpenID Connect) the server's answer names /auth/login: a "Sign in" button
// that returns to this page afterwards, and the server's words (a session that ended says
// why). Else bindery takes the identity from the login in front of it; with server.loginURL
// the page links it (only an http(s) address: the link is the server's, but a javascript: URL
// must never become one).
function signIn(err) {
  if (err.loginUrl === '/auth/login') {
    const next = encodeURIComponent(location.pathname + location.search);
    return h('section', {id: 'sign-in'},
      h('h1', {}, 'Sign in to bindery'),
      h('p', {id: 'sign-in-why'}, err.message || 'Sign in with your organisation\'s account.'),
      h('p', {class: 'actions'}, h('a', {href: `/auth/login?next=${next}`, class: 'button primary', id: 'sign-in-link', 'data-reload': true}, 'Sign in')),
      err.requestId ? h('p', {class: 'muted small'}, 'Request id: ', h('code', {}, err.requestId)) : null);
  }
  const login = err.loginUrl && /^https?:\/\//i.test(err.loginUrl) ? err.loginUrl : null;
  return h('section', {id: 'sign-in'},
    h('h1', {}, 'Please sign in'),
    login
      ? [h('p', {}, 'bindery needs to know who you are, and that comes from your organisation\'s sign-in.'),
        h('p', {class: 'actions'}, h('a', {href: login, class: 'button primary', id: 'sign-in-link', 'data-reload': true}, 'Sign in'),
          h('button', {type: 'button', onclick: boot, 'data-focus': 'retry'}, 'I have signed in: reload'))]
      : [h('p', {}, 'bindery takes who you are from the sign-in in front of it, and no identity reached it. Open bindery through your organisation\'s sign-in (the operators know its address), then reload this page.'),
        h('p', {class: 'actions'}, h('button', {type: 'button', onclick: boot, 'data-focus': 'retry'}, 'Reload'))],
    err.requestId ? h('p', {class: 'muted small'}, 'Request id: ', h('code', {}, err.requestId)) : null);
}

async function boot() {
  // Drop the cache-busting parameter of an automatic reload (recovery.js) from the address.
  const url = new URL(location.href);
  if (url.searchParams.has('_r')) {
    url.searchParams.delete('_r');
    history.replaceState(null, '', url.pathname + url.search + url.hash);
  }
  shell();
  swap(main, loading('bindery'));
  try {
    await loadMe();
  } catch (err) {
    me = null; // signed out (or never in): the header names nobody
    renderWho();
    renderNav(null);
    const demoUsers = err.code === 'UNAUTHENTICATED' ? demoUsersOf(err) : [];
    if (demoUsers.length) {
      // Demo mode without a user yet: the first page picks one (never a dead end).
      swap(main, h('h1', {}, 'Who are you in this demo?'),
        h('p', {}, 'bindery demo trusts the user you pick here (a real deployment uses your login). Pick one to start:'),
        h('ul', {class: 'demo-users'}, demoUsers.map((u) => {
          const b = h('button', {type: 'button', 'data-demo-user': u.name, 'aria-describedby': `demo-user-${u.name}`}, `Continue as ${u.name}`);
          b.addEventListener('click', () => switchUser(u.name));
          return h('li', {}, b, h('span', {class: 'muted small', id: `demo-user-${u.name}`}, u.who));
        })));
      return;
    }
    if (err.code === 'UNAUTHENTICATED') {
      swap(main, signIn(err));
      return;
    }
    const heading = err.code === 'NETWORK' ? 'bindery is not reachable' : 'bindery could not start';
    swap(main, h('h1', {}, heading), errorBox(err, boot));
    return;
  }
  render(false);
}

boot();
