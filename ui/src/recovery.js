// Release recovery (docs/api.md, 'Serving the page'): index.html loads it first, as a classic
// script of its own (the content policy allows no inline script), so it listens before any other
// asset loads.
//
// After a release, an open page may ask for a hashed asset that the new deployment no longer
// has (a page chunk it had not loaded yet), or a cached index may name an old bundle. When one
// of our scripts or stylesheets fails to load, or a dynamic import fails, the page reloads once
// with a cache-busting parameter, which fetches the current index.html. The time of that
// automatic reload is kept in sessionStorage: a second failure within 30 s does not reload
// again (that would loop on a broken deployment) but shows a "Refresh page" button.
(function () {
  var KEY = 'bindery.autoReloadAt';
  var WINDOW_MS = 30000;
  var handled = false;

  function ours(url) {
    try {
      var u = new URL(url, location.href);
      return u.origin === location.origin && u.pathname.indexOf('/assets/') === 0;
    } catch (e) {
      return false;
    }
  }

  function bustedURL() {
    var u = new URL(location.href);
    u.searchParams.set('_r', Date.now().toString(36));
    return u.href;
  }

  // css sets declarations one property at a time: the content policy refuses style
  // attributes, and browsers differ on whether setting the whole text counts as one.
  function css(el, text) {
    text.split(';').forEach(function (d) {
      var i = d.indexOf(':');
      if (i > 0) el.style.setProperty(d.slice(0, i).trim(), d.slice(i + 1).trim());
    });
  }

  function showButton() {
    if (document.getElementById('recovery')) return;
    var box = document.createElement('div');
    box.id = 'recovery';
    box.setAttribute('role', 'alert');
    css(box, 'position:fixed;inset:auto 0 0 0;z-index:1000;padding:1rem;background:#7a1f1f;color:#fff;' +
      'font:16px/1.4 system-ui,sans-serif;display:flex;gap:1rem;align-items:center;flex-wrap:wrap;justify-content:center');
    var text = document.createElement('span');
    text.textContent = 'Part of bindery failed to load, probably because a new version was just released.';
    var button = document.createElement('button');
    button.type = 'button';
    button.textContent = 'Refresh page';
    css(button, 'font:inherit;padding:.5rem 1rem;border:0;border-radius:4px;background:#fff;color:#7a1f1f;cursor:pointer');
    button.onclick = function () { location.replace(bustedURL()); };
    box.appendChild(text);
    box.appendChild(button);
    (document.body || document.documentElement).appendChild(box);
    button.focus();
  }

  // allowReload records an automatic reload now, unless one happened within the window — or
  // there is no sessionStorage to remember it by: then a reload could loop, so never.
  function allowReload(now) {
    try {
      var last = Number(sessionStorage.getItem(KEY)) || 0;
      if (now - last >= 0 && now - last < WINDOW_MS) return false;
      sessionStorage.setItem(KEY, String(now));
      return true;
    } catch (e) {
      return false;
    }
  }

  function recover() {
    if (handled) return;
    handled = true;
    if (allowReload(Date.now())) {
      location.replace(bustedURL());
    } else if (document.body) {
      showButton();
    } else {
      addEventListener('DOMContentLoaded', showButton);
    }
  }

  // Capture phase: load errors of <script> and <link> do not bubble.
  addEventListener('error', function (e) {
    var t = e.target;
    if (!t || t === window) return;
    if ((t.tagName === 'SCRIPT' && ours(t.src)) ||
        (t.tagName === 'LINK' && /stylesheet|modulepreload/.test(t.rel) && ours(t.href))) {
      recover();
    }
  }, true);

  var importFailure = /dynamically imported module|Importing a module script failed|error loading dynamically imported module/i;
  addEventListener('unhandledrejection', function (e) {
    var r = e.reason;
    if (r && importFailure.test(String(r.message || r))) recover();
  });

  // The app's lazy page loader reports failed imports here directly.
  window.binderyRecover = recover;
})();
