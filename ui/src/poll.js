// Live data without manual refresh: poll a loader on an interval, pause while the tab is
// hidden (refresh at once when it comes back), back off after failures, stop on unmount.

/**
 * poll calls load() now and then every intervalMs (or what intervalMs() returns). onData gets
 * each result, onError each failure; after failures the wait doubles up to 30 s. Returns
 * {stop, now}: stop ends polling, now() loads immediately (after a user action).
 */
export function poll(load, onData, onError, intervalMs) {
  let stopped = false;
  let timer = null;
  let failures = 0;
  let running = false;
  let again = false; // now() was called during a load: load once more when it ends

  const interval = () => (typeof intervalMs === 'function' ? intervalMs() : intervalMs);

  async function tick() {
    clearTimeout(timer);
    timer = null;
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      const data = await load();
      if (stopped) return;
      failures = 0;
      onData(data);
    } catch (err) {
      if (stopped) return;
      failures++;
      onError(err);
    } finally {
      running = false;
    }
    if (again) {
      again = false;
      tick();
      return;
    }
    schedule();
  }

  function schedule() {
    if (stopped || document.hidden) return;
    const wait = failures ? Math.min(30000, interval() * 2 ** failures) : interval();
    timer = setTimeout(tick, wait);
  }

  function visibility() {
    if (!document.hidden && !timer && !running) tick();
  }
  document.addEventListener('visibilitychange', visibility);
  tick();

  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', visibility);
    },
    now: tick,
  };
}

/**
 * liveIndicator shows whether a region is live: "Live · updated 14:03:22" or, after a failed
 * refresh, "Reconnecting…". Call ok() after each success and failed(err) after each failure.
 */
export function liveIndicator() {
  const el = document.createElement('p');
  el.className = 'live muted small';
  el.textContent = 'Connecting…';
  return {
    el,
    ok() {
      el.classList.remove('stale');
      el.textContent = `Live · updated ${new Date().toLocaleTimeString([], {hour: '2-digit', minute: '2-digit', second: '2-digit'})}`;
    },
    failed() {
      el.classList.add('stale');
      el.textContent = 'Connection lost · retrying…';
    },
  };
}
